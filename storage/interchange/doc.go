// Package interchange checks that sqlkube's storage and kube-apiserver's
// read each other's data: objects written through sqlkube's storage
// (storage.NewStore over the in-process storage.Local) are read back by the
// upstream k8s.io/apiserver etcd3 store over an etcd v3 gRPC client to the
// same `sqlkube etcd`, and the other way round, on every SQL backend.
//
// The package holds tests only. Both sides encode built-in types as
// kube-apiserver stores them: protobuf (the "k8s\x00" envelope), under
// /registry/<resource>/<namespace>/<name>.
package interchange
