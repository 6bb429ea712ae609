// Package e2e runs the sqlkube binary's etcd API against real clients:
// etcdctl subprocesses talking to `sqlkube etcd` on every datastore backend.
// It holds only tests.
package e2e
