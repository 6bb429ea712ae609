package registry

import (
	"fmt"
	"sync"

	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// CustomFieldManagers track managedFields and serve server-side apply for
// one version of a custom resource, over a type converter made from the
// CRD's schemas (merged with the built-in definitions, for ObjectMeta),
// as kube-apiserver does; a CRD whose schemas cannot be made into one is
// tracked with a deduced (schemaless) converter.
type CustomFieldManagers struct {
	r *Resource
	// staticDefs are the built-in OpenAPI definitions.
	staticDefs map[string]*spec.Schema
	mu         sync.Mutex
	converter  managedfields.TypeConverter
	bySub      map[string]*managedfields.FieldManager
}

func newCustomFieldManagers(r *Resource, staticDefs map[string]*spec.Schema) *CustomFieldManagers {
	return &CustomFieldManagers{r: r, staticDefs: staticDefs, bySub: map[string]*managedfields.FieldManager{}}
}

// Get is the field manager of the resource or of a subresource ("" for
// the resource), made at first use.
func (f *CustomFieldManagers) Get(subresource string) (*managedfields.FieldManager, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fm, ok := f.bySub[subresource]; ok {
		return fm, nil
	}
	if f.converter == nil {
		f.converter = SkipManagedFields(f.typeConverter())
	}
	conv := unstructuredConvertor{cr: f.r.Custom}
	fm, err := managedfields.NewDefaultCRDFieldManager(f.converter, conv, conv, conv, f.r.GVK, f.r.GroupVersion(), subresource, nil)
	if err != nil {
		return nil, err
	}
	f.bySub[subresource] = fm
	return fm, nil
}

func (f *CustomFieldManagers) typeConverter() managedfields.TypeConverter {
	crd := f.r.Custom.CRD
	specs := []*spec3.OpenAPI{{Version: "3.0.0", Components: &spec3.Components{Schemas: f.staticDefs}}}
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return managedfields.NewDeducedTypeConverter()
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return managedfields.NewDeducedTypeConverter()
	}
	tc, err := managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
	if err != nil {
		return managedfields.NewDeducedTypeConverter()
	}
	return tc
}

// unstructuredConvertor converts, defaults and creates custom resources
// for the field manager: with the CRD's converter (strategy Webhook),
// else versions differ only in apiVersion (strategy None); defaults come
// from the structural schema.
type unstructuredConvertor struct{ cr *CustomResource }

func (c unstructuredConvertor) Convert(in, out, _ any) error {
	src, ok1 := in.(*unstructured.Unstructured)
	dst, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return fmt.Errorf("cannot convert %T to %T", in, out)
	}
	dst.Object = runtime.DeepCopyJSON(src.Object)
	return nil
}

func (c unstructuredConvertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("cannot convert a %T", in)
	}
	if c.cr.converter != nil {
		return c.cr.converter.ConvertToVersion(u, target)
	}
	out := u.DeepCopy()
	if gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()}); ok {
		out.SetGroupVersionKind(gvk)
	}
	return out, nil
}

func (c unstructuredConvertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

func (c unstructuredConvertor) Default(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok && c.cr.structural != nil {
		structuraldefaulting.Default(u.Object, c.cr.structural)
	}
}

func (c unstructuredConvertor) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
