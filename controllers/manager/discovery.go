package manager

import (
	"context"
	"fmt"
	"sync"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/openapi"
	"k8s.io/controller-manager/pkg/clientbuilder"
)

// Generation reports a number that changes whenever what the API server's
// discovery serves may have, and whether it can tell at the moment
// (apiserver.Server.DiscoveryGeneration).
type Generation func() (generation uint64, ok bool)

// The resource-quota and garbage-collector controllers read the whole of
// discovery every 30 s to learn of new resources, each through a
// discovery client of its own (ClientBuilder.DiscoveryClient): two
// requests and two documents to build and decode per controller, the
// larger part of an idle tenant's allocations. In the API server's process
// the controllers are told when discovery changes instead: their discovery
// clients keep what they read until the generation moves, and read again
// on every call while the server cannot tell (as upstream does always).

// cachingBuilder is a client builder whose discovery clients are cached
// by generation.
type cachingBuilder struct {
	clientbuilder.ControllerClientBuilder
	generation Generation
}

func (b cachingBuilder) DiscoveryClient(name string) (discovery.DiscoveryInterface, error) {
	d, err := b.ControllerClientBuilder.DiscoveryClient(name)
	if err != nil {
		return nil, err
	}
	return newGenerationDiscovery(d, b.generation), nil
}

func (b cachingBuilder) DiscoveryClientOrDie(name string) discovery.DiscoveryInterface {
	d, err := b.DiscoveryClient(name)
	if err != nil {
		panic(fmt.Sprintf("discovery client %s: %v", name, err))
	}
	return d
}

// memCache is what client-go's memory cache implements.
type memCache interface {
	discovery.CachedDiscoveryInterface
	discovery.CachedDiscoveryInterfaceWithContext
}

// generationDiscovery answers the group and resource lists from a memory
// cache that it empties when the generation changes, or on every call
// when the generation cannot tell. OpenAPI is read through, uncached (a
// custom resource's schema can change without its resources changing);
// the rest is the cache's own.
type generationDiscovery struct {
	memCache
	direct     discovery.DiscoveryInterface
	generation Generation

	mu   sync.Mutex
	seen uint64
	have bool // seen is a generation the cache was filled at or after
}

func newGenerationDiscovery(d discovery.DiscoveryInterface, generation Generation) *generationDiscovery {
	return &generationDiscovery{memCache: memory.NewMemCacheClient(d).(memCache), direct: d, generation: generation}
}

func (d *generationDiscovery) OpenAPISchema() (*openapi_v2.Document, error) {
	return d.direct.OpenAPISchema()
}

func (d *generationDiscovery) OpenAPISchemaWithContext(ctx context.Context) (*openapi_v2.Document, error) {
	return discovery.ToDiscoveryInterfaceWithContext(d.direct).OpenAPISchemaWithContext(ctx)
}

func (d *generationDiscovery) OpenAPIV3() openapi.Client { return d.direct.OpenAPIV3() }

func (d *generationDiscovery) OpenAPIV3WithContext(ctx context.Context) openapi.ClientWithContext {
	return discovery.ToDiscoveryInterfaceWithContext(d.direct).OpenAPIV3WithContext(ctx)
}

// check empties the cache unless the generation is the one it was filled
// at. It reads the generation before the cache fills, so a change made
// while filling shows as a new generation next time.
func (d *generationDiscovery) check(ctx context.Context) {
	g, ok := d.generation()
	d.mu.Lock()
	defer d.mu.Unlock()
	if ok && d.have && g == d.seen {
		return
	}
	d.InvalidateWithContext(ctx)
	d.seen, d.have = g, ok
}

func (d *generationDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	return d.ServerGroupsWithContext(context.Background())
}

func (d *generationDiscovery) ServerGroupsWithContext(ctx context.Context) (*metav1.APIGroupList, error) {
	d.check(ctx)
	return d.memCache.ServerGroupsWithContext(ctx)
}

func (d *generationDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	return d.ServerResourcesForGroupVersionWithContext(context.Background(), gv)
}

func (d *generationDiscovery) ServerResourcesForGroupVersionWithContext(ctx context.Context, gv string) (*metav1.APIResourceList, error) {
	d.check(ctx)
	return d.memCache.ServerResourcesForGroupVersionWithContext(ctx, gv)
}

func (d *generationDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return d.ServerGroupsAndResourcesWithContext(context.Background())
}

func (d *generationDiscovery) ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	d.check(ctx)
	return d.memCache.ServerGroupsAndResourcesWithContext(ctx)
}

func (d *generationDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return d.ServerPreferredResourcesWithContext(context.Background())
}

func (d *generationDiscovery) ServerPreferredResourcesWithContext(ctx context.Context) ([]*metav1.APIResourceList, error) {
	d.check(ctx)
	return d.memCache.ServerPreferredResourcesWithContext(ctx)
}

func (d *generationDiscovery) ServerPreferredNamespacedResources() ([]*metav1.APIResourceList, error) {
	return d.ServerPreferredNamespacedResourcesWithContext(context.Background())
}

func (d *generationDiscovery) ServerPreferredNamespacedResourcesWithContext(ctx context.Context) ([]*metav1.APIResourceList, error) {
	d.check(ctx)
	return d.memCache.ServerPreferredNamespacedResourcesWithContext(ctx)
}
