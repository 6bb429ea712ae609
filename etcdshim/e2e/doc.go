// Package e2e runs the sqlkube binary against real clients: etcdctl
// subprocesses and clientv3 talking to `sqlkube etcd` (plain, over TLS,
// across a kill -9, with its /metrics), and the migrate command, on every
// datastore backend. It holds only tests.
package e2e
