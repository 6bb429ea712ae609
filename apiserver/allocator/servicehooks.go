package allocator

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
	svcstorage "k8s.io/kubernetes/pkg/registry/core/service/storage"
)

// ServiceHooks is Kubernetes' own service REST
// (k8s.io/kubernetes/pkg/registry/core/service/storage) for one write,
// claiming from ips and ports for owner ("namespace/name") on ctx. Only
// its allocation hooks are for use (Store.BeginCreate, Store.BeginUpdate:
// IP family policy and defaults, dual-stack refusals, requested and
// random cluster IPs, node ports and health check node ports, every
// change of type): it has no storage.
func ServiceHooks(ctx context.Context, ips, ports *Reservations, owner string) (*svcstorage.REST, error) {
	ip := ips.IPAllocator(ctx, owner)
	rest, _, _, err := svcstorage.NewREST(hooksOnly{}, ip.IPFamily(),
		map[api.IPFamily]ipallocator.Interface{ip.IPFamily(): ip}, ports.PortAllocator(ctx, owner), nil, nil, nil)
	return rest, err
}

// hooksOnly gives Kubernetes' service REST a storage it never reaches.
type hooksOnly struct{}

func (hooksOnly) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{
		StorageConfig:  &storagebackend.ConfigForResource{GroupResource: resource},
		ResourcePrefix: "/services/specs",
		Decorator: func(*storagebackend.ConfigForResource, string, func(runtime.Object) (string, error), func() runtime.Object,
			func() runtime.Object, k8sstorage.AttrFunc, k8sstorage.IndexerFuncs, *cache.Indexers) (k8sstorage.Interface, factory.DestroyFunc, error) {
			return nil, func() {}, nil
		},
	}, nil
}
