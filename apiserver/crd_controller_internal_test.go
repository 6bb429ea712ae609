package apiserver

import (
	"io"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// wrapped stands for the watch cache's wrapper of the objects it
// dispatches (upstream's cachingObject is unexported).
type wrapped struct {
	runtime.Object // the wrapper is an object too
	inner          runtime.Object
}

func (w *wrapped) CacheEncode(_ runtime.Identifier, encode func(runtime.Object, io.Writer) error, out io.Writer) error {
	return encode(w.inner, out)
}
func (w *wrapped) GetObject() runtime.Object { return w.inner }

// The controller handles a CRD whether the watch cache sent it bare
// (replayed from its history) or wrapped (dispatched as it happened):
// before crdOf, a wrapped one was taken for something else and ignored,
// and the CRD was never established (seen when the API server started
// fast enough for its controller's watch to be served from a ready cache).
func TestCRDOf_BareAndWrapped(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"}}
	got, ok := crdOf(crd)
	if !ok || got != crd {
		t.Fatalf("bare: %v, %v", got, ok)
	}
	w := &wrapped{Object: crd, inner: crd}
	got, ok = crdOf(w)
	if !ok || got.Name != crd.Name {
		t.Fatalf("wrapped: %v, %v", got, ok)
	}
	if got == crd {
		t.Error("a wrapped object is shared: crdOf must hand out a copy")
	}
	if _, ok := crdOf(&wrapped{Object: &metav1.Status{}, inner: &metav1.Status{}}); ok {
		t.Error("a wrapped Status taken for a CRD")
	}
}
