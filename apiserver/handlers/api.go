package handlers

import (
	"context"
	"net/http"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/admission"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	kubeletclient "k8s.io/kubernetes/pkg/kubelet/client"

	"github.com/sqlkube/sqlkube/apiserver/allocator"
	"github.com/sqlkube/sqlkube/apiserver/authn"
	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/registry"
)

// API is what the REST handlers serve from: the resource table and its
// stores, what writes go through (admission, managed fields, address
// allocation, RBAC escalation checks) and the kubelets' connections.
type API struct {
	// Subresources are served by their own handlers; Scale serves the
	// scale subresource of every resource that has one.
	Subresources Subresources
	Scale        func(*Request) error
	Registry     *registry.Registry
	Storages     map[*registry.Resource]k8sstorage.Interface
	// stopping is closed when the server shuts down: watches end.
	Stopping chan struct{}
	// clusterIPs and nodePorts hand out services' addresses and ports.
	ClusterIPs, NodePorts *allocator.Reservations
	// fieldManagers track managedFields and serve server-side apply.
	FieldManagers *FieldManagers
	// encoded caches the JSON of listed objects, by resource
	// (*Resource -> *encodedItems; encode_list.go).
	encoded sync.Map
	// authz checks RBAC escalation on writes of roles and bindings.
	Authz *authz.Authorizer
	// serviceAccounts signs TokenRequests' tokens; nil without a signing
	// key.
	ServiceAccounts *authn.ServiceAccounts
	// admission is the chain of admission plugins; nil admits
	// everything. admissionObjects convert for it and know the built-in
	// resources' equivalents. nodeRestriction admits nodes' writes.
	Admission        admission.Interface
	AdmissionObjects admission.ObjectInterfaces
	NodeRestriction  *NodeRestriction
	// kubelets reach nodes' kubelets (kubelets.go), made at first use
	// with the server's client certificate and the kubelets' CA.
	kubeletOnce                                    sync.Once
	kubelets                                       kubeletclient.ConnectionInfoGetter
	kubeletErr                                     error
	KubeletCertFile, KubeletKeyFile, KubeletCAFile string
	// ClusterDial connects to pods and nodes (nil: directly);
	// ProxyTransport reaches pods, and nodes on other ports than the
	// kubelet's, for the proxy subresources (NewProxyTransport).
	ClusterDial    utilnet.DialFunc
	ProxyTransport http.RoundTripper
}

// storageFor is a resource's store: the custom resource's own, or the
// built-in one made by New.
func (s *API) storageFor(r *registry.Resource) k8sstorage.Interface {
	if r.Custom != nil {
		return r.Custom.Storage
	}
	return s.Storages[r]
}

// ctxDone reports whether the request was abandoned.
func ctxDone(ctx context.Context) bool { return ctx.Err() != nil }
