package subresources

import (
	"context"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	svcstorage "k8s.io/kubernetes/pkg/registry/core/service/storage"
)

// Kubernetes' registry functions (the pod, node and service locations)
// read objects through rest.Getter and generic stores, as internal
// types. What is here reads them through the server's own stores.

// coreGetter reads one core/v1 resource's objects (in the request's
// namespace, where the resource has one) as their internal type.
type coreGetter struct {
	h        *handlers.Request
	resource string
}

var _ rest.Getter = coreGetter{}

func (g coreGetter) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	gr := corev1.Resource(g.resource)
	r, ok := g.h.API.Registry.Lookup(corev1.SchemeGroupVersion.WithResource(g.resource))
	if !ok {
		return nil, apierrors.NewNotFound(gr, name)
	}
	obj := r.New()
	if err := g.h.API.Storages[r].Get(ctx, r.Key(request.NamespaceValue(ctx), name), k8sstorage.GetOptions{}, obj); err != nil {
		return nil, storeerr.InterpretGetError(err, gr, name)
	}
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return in, nil
}

// serviceSlices reads a service's EndpointSlices (those labelled
// kubernetes.io/service-name with its name) from the server's store, for
// Kubernetes' service location (proxy.EndpointSliceGetter).
type serviceSlices struct{ h *handlers.Request }

func (g serviceSlices) GetEndpointSlices(namespace, service string) ([]*discoveryv1.EndpointSlice, error) {
	r, ok := g.h.API.Registry.Lookup(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"))
	if !ok {
		return nil, nil
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := g.h.API.Storages[r].GetList(g.h.Ctx, r.ListKey(namespace), k8sstorage.ListOptions{Predicate: k8sstorage.Everything, Recursive: true}, list); err != nil {
		return nil, storeerr.InterpretListError(err, r.GroupResource())
	}
	var out []*discoveryv1.EndpointSlice
	for i := range list.Items {
		if list.Items[i].Labels[discoveryv1.LabelServiceName] == service {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// serviceLocator is Kubernetes' service REST
// (k8s.io/kubernetes/pkg/registry/core/service/storage) for one request
// on a service, for its ResourceLocation: it reads the request's services
// (a port given by number is looked up by name), their EndpointSlices and the
// pods behind them, and answers with h.API.ProxyTransport. It allocates
// nothing (allocator.ServiceHooks is the one that writes).
func serviceLocator(h *handlers.Request) (*svcstorage.REST, error) {
	store, _, _, err := svcstorage.NewREST(readThrough{r: h.Resource, store: h.Store}, api.IPv4Protocol, nil, nil,
		serviceSlices{h: h}, coreGetter{h: h, resource: "pods"}, h.API.ProxyTransport)
	return store, err
}

// readThrough gives Kubernetes' generic store for r the server's store of
// r, read into internal objects.
type readThrough struct {
	r     *registry.Resource
	store k8sstorage.Interface
}

func (o readThrough) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{
		StorageConfig:  &storagebackend.ConfigForResource{GroupResource: resource},
		ResourcePrefix: o.r.StoragePrefix,
		Decorator: func(*storagebackend.ConfigForResource, string, func(runtime.Object) (string, error), func() runtime.Object,
			func() runtime.Object, k8sstorage.AttrFunc, k8sstorage.IndexerFuncs, *cache.Indexers) (k8sstorage.Interface, factory.DestroyFunc, error) {
			return internalGets{Interface: o.store, r: o.r}, func() {}, nil
		},
	}, nil
}

// internalGets is a store whose Get reads the served version and converts
// it into the internal object it is given; only Get may be called with
// internal objects.
type internalGets struct {
	k8sstorage.Interface
	r *registry.Resource
}

func (s internalGets) Get(ctx context.Context, key string, opts k8sstorage.GetOptions, into runtime.Object) error {
	obj := s.r.New()
	if err := s.Interface.Get(ctx, key, opts, obj); err != nil {
		return err
	}
	return legacyscheme.Scheme.Convert(obj, into, nil)
}
