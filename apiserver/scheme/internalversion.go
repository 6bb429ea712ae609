package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// defaultObject sets Kubernetes' defaults on a served-version object, as
// kube-apiserver does when it decodes one.
func Default(obj runtime.Object) { legacyscheme.Scheme.Default(obj) }

// toInternal converts a served-version object to its internal version.
func ToInternal(obj runtime.Object) (runtime.Object, error) {
	gvks, _, err := legacyscheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	out, err := legacyscheme.Scheme.New(gvks[0].GroupKind().WithVersion(runtime.APIVersionInternal))
	if err != nil {
		return nil, err
	}
	if err := legacyscheme.Scheme.Convert(obj, out, nil); err != nil {
		return nil, fmt.Errorf("converting %s to the internal version: %w", gvks[0].Kind, err)
	}
	return out, nil
}

// fromInternal converts an internal object back to into's version, into a
// new object made by newObj.
func FromInternal(in runtime.Object, newObj func() runtime.Object) (runtime.Object, error) {
	out := newObj()
	if err := legacyscheme.Scheme.Convert(in, out, nil); err != nil {
		return nil, fmt.Errorf("converting %T from the internal version: %w", out, err)
	}
	return out, nil
}
