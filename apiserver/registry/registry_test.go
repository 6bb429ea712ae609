package registry

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRegistry_Generation: every change of the served resources moves the
// generation (discovery's clients read again when it does); a Remove that
// changes nothing does not.
func TestRegistry_Generation(t *testing.T) {
	widgets := &Resource{GVK: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, Plural: "widgets"}
	reg := NewRegistry()
	g0 := reg.Generation()
	if reg.Add(widgets); reg.Generation() == g0 {
		t.Fatal("Add did not move the generation")
	}
	g1 := reg.Generation()
	again := *widgets
	if reg.Add(&again); reg.Generation() == g1 {
		t.Fatal("replacing a resource did not move the generation")
	}
	g2 := reg.Generation()
	if reg.Remove(widgets) || reg.Generation() != g2 {
		t.Fatal("removing a resource no longer served changed the registry")
	}
	if !reg.Remove(&again) || reg.Generation() == g2 {
		t.Fatal("Remove did not move the generation")
	}
}
