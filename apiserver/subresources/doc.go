// Package subresources serves the subresources that have their own
// handlers: every scalable resource's scale (Scale: workloads' replicas,
// custom resources' scale paths), and the core group's pods' binding and
// eviction, the kubelet's pod logs, exec, attach and port-forward, the
// proxies of pods, services and nodes and service accounts' token
// (TokenRequest). Table and Scale are
// what the API server installs as handlers.API.Subresources and
// handlers.API.Scale.
package subresources
