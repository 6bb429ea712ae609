package admission

import (
	"sync/atomic"
	"testing"

	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/openapi"
)

// countingOpenAPI is an OpenAPI v3 client whose index names the number of
// times it was read.
type countingOpenAPI struct{ reads atomic.Int64 }

func (c *countingOpenAPI) Paths() (map[string]openapi.GroupVersion, error) {
	n := c.reads.Add(1)
	paths := map[string]openapi.GroupVersion{"api/v1": nil}
	if n > 1 {
		paths["apis/example.com/v1"] = nil
	}
	return paths, nil
}

// openAPIClientset is a fake clientset whose discovery's OpenAPIV3 is v3.
type openAPIClientset struct {
	*fake.Clientset
	v3 openapi.Client
}

func (c openAPIClientset) Discovery() discovery.DiscoveryInterfaces {
	return openAPIDiscovery{FakeDiscovery: c.Clientset.Discovery().(*fakediscovery.FakeDiscovery), v3: c.v3}
}

type openAPIDiscovery struct {
	*fakediscovery.FakeDiscovery
	v3 openapi.Client
}

func (d openAPIDiscovery) OpenAPIV3() openapi.Client { return d.v3 }

func TestOpenAPIPaths(t *testing.T) {
	v3 := &countingOpenAPI{}
	var gen atomic.Uint64
	var unknown atomic.Bool
	client := openAPIPathsClient(openAPIClientset{Clientset: fake.NewClientset(), v3: v3}, func() (uint64, bool) { return gen.Load(), !unknown.Load() })
	read := func() map[string]openapi.GroupVersion {
		t.Helper()
		// As the mutating-policy plugin reads it.
		paths, err := client.Discovery().OpenAPIV3().Paths()
		if err != nil {
			t.Fatal(err)
		}
		return paths
	}
	for range 3 {
		paths := read()
		if _, ok := paths["apis/example.com/v1"]; ok || len(paths) != 1 {
			t.Fatalf("paths %v at the first generation", paths)
		}
		delete(paths, "api/v1") // the caller's copy
	}
	if n := v3.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the index at one generation, want 1", n)
	}
	gen.Add(1)
	if paths := read(); len(paths) != 2 {
		t.Fatalf("paths %v after the generation moved", paths)
	}
	unknown.Store(true)
	read()
	read()
	if n := v3.reads.Load(); n != 4 {
		t.Fatalf("%d reads, want 4: every call reads while the generation cannot tell", n)
	}
}
