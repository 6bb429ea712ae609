package manager

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubetesting "k8s.io/client-go/testing"
)

// countingDiscovery counts the reads of the group list, which the memory
// cache makes once per fill.
type countingDiscovery struct {
	*fakediscovery.FakeDiscovery
	reads atomic.Int64
}

func (c *countingDiscovery) ServerGroupsWithContext(ctx context.Context) (*metav1.APIGroupList, error) {
	c.reads.Add(1)
	return c.FakeDiscovery.ServerGroupsWithContext(ctx)
}

func (c *countingDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	return c.ServerGroupsWithContext(context.Background())
}

// resourceNames are the group-version/resource names in lists, or the
// error.
func resourceNames(lists []*metav1.APIResourceList, err error) []string {
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			out = append(out, l.GroupVersion+"/"+r.Name)
		}
	}
	slices.Sort(out)
	return out
}

func TestGenerationDiscovery(t *testing.T) {
	fake := &countingDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &kubetesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"list", "delete"}}}},
	}}}}
	var gen atomic.Uint64
	known := atomic.Bool{}
	known.Store(true)
	d := newGenerationDiscovery(fake, func() (uint64, bool) { return gen.Load(), known.Load() })
	var _ discovery.DiscoveryInterface = d
	var _ discovery.DiscoveryInterfaceWithContext = d

	// Unchanged generation: one read, whatever the calls.
	for range 3 {
		if got := resourceNames(d.ServerPreferredResources()); !slices.Equal(got, []string{"v1/pods"}) {
			t.Fatalf("resources %v", got)
		}
	}
	if _, err := d.ServerPreferredNamespacedResourcesWithContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := fake.reads.Load(); n != 1 {
		t.Fatalf("%d reads of discovery at one generation, want 1", n)
	}

	// A new resource: not seen until the generation moves, then seen.
	fake.Resources = append(fake.Resources, &metav1.APIResourceList{GroupVersion: "example.com/v1",
		APIResources: []metav1.APIResource{{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: metav1.Verbs{"list", "delete"}}}})
	if got := resourceNames(d.ServerPreferredResources()); !slices.Equal(got, []string{"v1/pods"}) {
		t.Fatalf("resources %v before the generation moved", got)
	}
	gen.Add(1)
	want := []string{"example.com/v1/widgets", "v1/pods"}
	if got := resourceNames(d.ServerPreferredResources()); !slices.Equal(got, want) {
		t.Fatalf("resources %v after the generation moved, want %v", got, want)
	}
	_, lists, err := d.ServerGroupsAndResources()
	if got := resourceNames(lists, err); !slices.Equal(got, want) {
		t.Fatalf("groups and resources %v, want %v", got, want)
	}
	if n := fake.reads.Load(); n != 2 {
		t.Fatalf("%d reads after one change, want 2", n)
	}

	// readsAfter makes n calls and returns the reads made so far.
	readsAfter := func(n int) int64 {
		t.Helper()
		for range n {
			if _, err := d.ServerPreferredResources(); err != nil {
				t.Fatal(err)
			}
		}
		return fake.reads.Load()
	}
	// While the generation cannot tell, every call reads.
	known.Store(false)
	if n := readsAfter(2); n != 4 {
		t.Fatalf("%d reads, want 4: two calls while the generation cannot tell", n)
	}
	// Known again, at the same number: the first call reads (what was
	// read while unknown is not trusted), the next does not.
	known.Store(true)
	if n := readsAfter(2); n != 5 {
		t.Fatalf("%d reads, want 5", n)
	}
}
