package storage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestOwnCopy: a watcher's copy equals the ring's object, and setting its
// kind, as an encoder does, leaves the ring's object alone.
func TestOwnCopy(t *testing.T) {
	for _, obj := range []runtime.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"app": "a"}}},
		&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "a"}}},
	} {
		c := ownCopy(obj)
		if c == obj {
			t.Errorf("%T: not copied", obj)
			continue
		}
		if !equality.Semantic.DeepEqual(c, obj) {
			t.Errorf("%T: copy %v differs from %v", obj, c, obj)
		}
		c.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Other"})
		if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
			t.Errorf("%T: setting the copy's kind set the original's to %v", obj, gvk)
		}
	}
}
