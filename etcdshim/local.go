package etcdshim

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
)

// LocalClient returns an etcd client that calls this server's services in
// the same process: no listener, no gRPC transport and no protobuf encoding,
// only calls and channels (etcd's own server-to-client adapters, and
// localKV for the streaming range they lack). It is how
// sqlkube's storage layer reaches the store when everything runs in one
// binary; Close the client when done. Stop ends its watches too.
func (s *Server) LocalClient() *clientv3.Client {
	c := clientv3.NewCtxClient(context.Background(), clientv3.WithZapLogger(zap.NewNop()))
	kv := &kvServer{s: s}
	c.KV = clientv3.NewKVFromKVClient(localKV{KVClient: adapter.KvServerToKvClient(kv), s: kv}, c)
	c.Watcher = clientv3.NewWatchFromWatchClient(adapter.WatchServerToWatchClient(&watchServer{s: s}), c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(adapter.LeaseServerToLeaseClient(&leaseServer{s: s}), c, 5*time.Second)
	c.Maintenance = clientv3.NewMaintenanceFromMaintenanceClient(adapter.MaintenanceServerToMaintenanceClient(&maintenanceServer{s: s}), c)
	c.Cluster = clientv3.NewClusterFromClusterClient(adapter.ClusterServerToClusterClient(&clusterServer{s: s}), c)
	return c
}
