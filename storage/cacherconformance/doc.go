// Package cacherconformance runs Kubernetes' own storage conformance suite
// (k8s.io/apiserver/pkg/storage/testing) against the apiserver's watch cache
// (k8s.io/apiserver/pkg/storage/cacher) as sqlkube builds it: storage.NewCacher
// in front of storage.NewStore, reaching sqlkube's etcd API in-process
// (storage.Local) over a SQLite database.
//
// The package holds tests only: each upstream RunTest* function the cacher
// package's own tests run is run here with the same arguments and feature
// gates. The few helpers upstream writes against the cacher's internals (its
// compaction callbacks) are redone through public behaviour. Upstream's
// RunBenchmark* functions are benchmarks, not conformance checks, and are
// not run here; sqlkube's storage benchmarks are in package storage.
package cacherconformance
