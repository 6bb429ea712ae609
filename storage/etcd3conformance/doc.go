// Package etcd3conformance runs Kubernetes' own storage conformance suite
// (k8s.io/apiserver/pkg/storage/testing) through the apiserver's etcd3
// storage (k8s.io/apiserver/pkg/storage/etcd3, built by storage.NewStore)
// against sqlkube's etcd API server (etcdshim over etcdshim/sqlstore), on
// every SQL backend.
//
// The package holds tests only: each upstream RunTest* function the etcd3
// package's own tests run is run here, once per backend and per way down to
// the server, against a fresh database: over gRPC (storage.Remote), exactly
// as kube-apiserver would reach it, and in-process (storage.Local), as
// sqlkube's own apiserver does. Upstream's RunBenchmark* functions are
// benchmarks sized for an in-memory etcd, not conformance checks, and are
// not run here; sqlkube's storage benchmarks are in package storage.
package etcd3conformance
