package handlers

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func newStringSet(items ...string) sets.String { return sets.NewString(items...) }

// validateObjectMeta checks names, labels, annotations and the rest of
// metadata as Kubernetes does (namespaces are DNS labels, other names DNS
// subdomains).
//
// Resources with a Kubernetes strategy are checked by it instead (with the
// name rules of their type: RBAC names are path segments, say).
func validateObjectMeta(m metav1.Object, r *registry.Resource) field.ErrorList {
	if r.EffectiveStrategy() != nil {
		return nil
	}
	nameFn := apimachineryvalidation.NameIsDNSSubdomain
	if r.GVK.Group == "" && r.Plural == "namespaces" {
		nameFn = apimachineryvalidation.ValidateNamespaceName
	}
	return apimachineryvalidation.ValidateObjectMetaAccessor(m, r.Namespaced, nameFn, field.NewPath("metadata"))
}

// copyField sets dst's exported struct field name to src's (both pointers
// to the same struct type). On unstructured objects it copies the
// top-level key of the field's JSON name ("Status": "status"), removing it
// from dst when src has none.
func copyField(src, dst runtime.Object, name string) error {
	if su, ok := src.(*unstructured.Unstructured); ok {
		du, ok := dst.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("copy %s: %T into %T", name, src, dst)
		}
		key := strings.ToLower(name[:1]) + name[1:]
		if v, ok := su.Object[key]; ok {
			du.Object[key] = runtime.DeepCopyJSONValue(v)
		} else {
			delete(du.Object, key)
		}
		return nil
	}
	s, d := reflect.ValueOf(src).Elem(), reflect.ValueOf(dst).Elem()
	if s.Type() != d.Type() {
		return fmt.Errorf("copy %s: %T into %T", name, src, dst)
	}
	f := s.FieldByName(name)
	if !f.IsValid() {
		return nil
	}
	d.FieldByName(name).Set(f)
	return nil
}

// hasSpec reports whether objects of obj's type have a spec (only those
// carry a generation). Unstructured objects (custom resources) always do,
// as in Kubernetes.
func hasSpec(obj runtime.Object) bool {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		return true
	}
	return reflect.ValueOf(obj).Elem().FieldByName("Spec").IsValid()
}

// specChanged reports whether anything but metadata and status differs.
func SpecChanged(old, updated runtime.Object) bool {
	if ou, ok := old.(*unstructured.Unstructured); ok {
		if nu, ok := updated.(*unstructured.Unstructured); ok {
			return !apiequality.Semantic.DeepEqual(registry.ContentWithout(ou, "metadata", "status"), registry.ContentWithout(nu, "metadata", "status"))
		}
	}
	if !hasSpec(old) {
		return false
	}
	a, b := old.DeepCopyObject(), updated.DeepCopyObject()
	for _, o := range []runtime.Object{a, b} {
		v := reflect.ValueOf(o).Elem()
		for _, name := range []string{"TypeMeta", "ObjectMeta", "Status"} {
			if f := v.FieldByName(name); f.IsValid() {
				f.Set(reflect.Zero(f.Type()))
			}
		}
	}
	return !apiequality.Semantic.DeepEqual(a, b)
}

// copyManagedFields sets dst's managedFields to src's.
func copyManagedFields(src, dst runtime.Object) error {
	s, err := meta.Accessor(src)
	if err != nil {
		return err
	}
	d, err := meta.Accessor(dst)
	if err != nil {
		return err
	}
	d.SetManagedFields(s.GetManagedFields())
	return nil
}
