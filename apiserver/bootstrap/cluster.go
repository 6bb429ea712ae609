package bootstrap

import (
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver/allocator"
	"github.com/sqlkube/sqlkube/apiserver/registry"
)

// Cluster is what bootstrapping writes through: the API server's stores
// (objects written before any client can be), its loopback client and
// the etcd client its leases and reservations use.
type Cluster struct {
	Etcd   *clientv3.Client
	Logger zerolog.Logger
	// ServiceClusterIPRange is where services' cluster IPs come from;
	// ClusterIPs hands them out.
	ServiceClusterIPRange string
	ClusterIPs            *allocator.Reservations
	// NodePorts hands out services' node ports.
	NodePorts *allocator.Reservations
	Registry  *registry.Registry
	Storages  map[*registry.Resource]k8sstorage.Interface
	// Loopback reaches the API server in memory as system:masters.
	Loopback *rest.Config
}
