package manager

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

// Kubernetes' CreateControllerContext reserves the informer name
// "kube-controller-manager", which must be unique in a process, until the
// informer factory shuts down: a second controller manager in the same
// process (a host's tenants each run one) cannot make its context. The
// first one of the process uses upstream's; the others get the same
// context made here from the same libraries, under an informer name of
// their own.
var (
	contextMu   sync.Mutex // the check and the reservation go together
	contextSeq  atomic.Int64
	upstreamKCM = "kube-controller-manager"
)

// createControllerContext is app.CreateControllerContext where the
// process-wide informer name is free, else its equivalent under a name of
// this manager's own. The API server must already answer.
func createControllerContext(ctx context.Context, c *kcmconfig.CompletedConfig, root, builder clientbuilder.ControllerClientBuilder) (app.ControllerContext, error) {
	contextMu.Lock()
	defer contextMu.Unlock()
	if n, err := cache.NewInformerName(upstreamKCM); err == nil {
		n.Release()
		return app.CreateControllerContext(ctx, c, root, builder)
	}
	name, err := cache.NewInformerName(fmt.Sprintf("%s-%d", upstreamKCM, contextSeq.Add(1)))
	if err != nil {
		return app.ControllerContext{}, err
	}
	return ownControllerContext(ctx, c, root, builder, name)
}

// ownControllerContext builds a controller context as kube-controller-
// manager builds its own: informers with managed fields trimmed, metadata
// informers, a discovery REST mapper reset every 30 s and, with the
// garbage collector, its graph builder.
func ownControllerContext(ctx context.Context, c *kcmconfig.CompletedConfig, root, builder clientbuilder.ControllerClientBuilder, name *cache.InformerName) (app.ControllerContext, error) {
	fail := func(err error) (app.ControllerContext, error) {
		name.Release()
		return app.ControllerContext{}, fmt.Errorf("controller context: %w", err)
	}
	noManagedFields := func(obj any) (any, error) {
		if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
			a.SetManagedFields(nil)
		}
		return obj, nil
	}
	client, err := root.Client("shared-informers")
	if err != nil {
		return fail(err)
	}
	resync := app.ResyncPeriod(c)
	shared := informers.NewSharedInformerFactoryWithOptions(client, resync(), informers.WithTransform(noManagedFields), informers.WithInformerName(name))
	mdConfig, err := root.Config("metadata-informers")
	if err != nil {
		return fail(err)
	}
	mdClient, err := metadata.NewForConfig(mdConfig)
	if err != nil {
		return fail(err)
	}
	mdInformers := metadatainformer.NewSharedInformerFactoryWithOptions(mdClient, resync(), metadatainformer.WithTransform(noManagedFields))
	disco, err := root.DiscoveryClient("controller-discovery")
	if err != nil {
		return fail(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	go wait.Until(mapper.Reset, 30*time.Second, ctx.Done())
	cc := app.ControllerContext{
		ClientBuilder:                   builder,
		InformerFactory:                 shared,
		ObjectOrMetadataInformerFactory: informerfactory.NewInformerFactory(shared, mdInformers),
		ComponentConfig:                 c.ComponentConfig,
		RESTMapper:                      mapper,
		InformersStarted:                make(chan struct{}),
		ResyncPeriod:                    resync,
		ControllerManagerMetrics:        controllersmetrics.NewControllerManagerMetrics(upstreamKCM),
	}
	gc := c.ComponentConfig.GarbageCollectorController
	if gc.EnableGarbageCollector && cc.IsControllerEnabled(app.NewControllerDescriptors()[names.GarbageCollectorController]) {
		ignored := map[schema.GroupResource]struct{}{}
		for _, r := range gc.GCIgnoredResources {
			ignored[schema.GroupResource{Group: r.Group, Resource: r.Resource}] = struct{}{}
		}
		cc.GraphBuilder = garbagecollector.NewDependencyGraphBuilder(ctx, mdClient, mapper, ignored, cc.ObjectOrMetadataInformerFactory, cc.InformersStarted)
	}
	controllersmetrics.Register()
	return cc, nil
}
