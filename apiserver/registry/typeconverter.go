package registry

import (
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// SkipManagedFields wraps a type converter so that objects are made typed
// without their metadata.managedFields. The field manager hands it the
// live object with its managedFields still set; converting them means a
// JSON decode of every FieldsV1 entry and a walk of the list, and on a
// Lease renewal that was a third of the field manager's cost. Leaving
// them out changes no result: the field manager strips metadata.managedFields
// from every manager's set, so what the comparison says about them
// (removed, as the new object has none by then) touches nothing, and it
// writes the managedFields of the result itself. The object passed in is
// never modified: a shallow copy is converted.
func SkipManagedFields(tc managedfields.TypeConverter) managedfields.TypeConverter {
	return skipManagedFields{tc}
}

type skipManagedFields struct{ managedfields.TypeConverter }

func (c skipManagedFields) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	return c.TypeConverter.ObjectToTyped(withoutManagedFields(obj), opts...)
}

// withoutManagedFields is obj itself when it has no managedFields, else a
// shallow copy without them (nested values are shared, not copied).
func withoutManagedFields(obj runtime.Object) runtime.Object {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		md, ok := u.Object["metadata"].(map[string]any)
		if !ok {
			return obj
		}
		if _, ok := md["managedFields"]; !ok {
			return obj
		}
		top := make(map[string]any, len(u.Object))
		for k, v := range u.Object {
			top[k] = v
		}
		m := make(map[string]any, len(md))
		for k, v := range md {
			if k != "managedFields" {
				m[k] = v
			}
		}
		top["metadata"] = m
		return &unstructured.Unstructured{Object: top}
	}
	acc, err := meta.Accessor(obj)
	if err != nil || len(acc.GetManagedFields()) == 0 {
		return obj
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	cp := c.Interface().(runtime.Object) // the same pointer type as obj
	cacc, _ := meta.Accessor(cp)         // as acc, it has an ObjectMeta
	cacc.SetManagedFields(nil)
	return cp
}
