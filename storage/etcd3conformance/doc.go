// Package etcd3conformance runs Kubernetes' own storage conformance suite
// (k8s.io/apiserver/pkg/storage/testing) through the apiserver's etcd3
// storage (k8s.io/apiserver/pkg/storage/etcd3) against sqlkube's etcd API
// server (etcdshim over etcdshim/sqlstore), on every SQL backend.
//
// The package holds tests only: each upstream RunTest* function the etcd3
// package's own tests run is run here, once per backend, against a fresh
// database and an in-process etcdshim server reached over gRPC, exactly as
// kube-apiserver would reach it.
package etcd3conformance
