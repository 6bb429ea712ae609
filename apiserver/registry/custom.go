package registry

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiextensionscel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/registry/rest"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// CustomResource is what serving one version of a CRD's resource needs
// besides the generic Resource fields: its storage (JSON under
// /registry/GROUP/PLURAL, like kube-apiserver), structural schema and
// validator, table columns, scale paths and field managers.
type CustomResource struct {
	CRD     *apiextensionsv1.CustomResourceDefinition
	version string
	// storage is the resource's store and watch cache; stop ends them.
	Storage k8sstorage.Interface
	Stop    func()
	// structural is nil when the version has no schema (never for v1 CRDs
	// that passed validation).
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	// cel checks the schema's x-kubernetes-validations rules (nil: none).
	cel   *apiextensionscel.Validator
	Table rest.TableConvertor
	Scale *apiextensionsv1.CustomResourceSubresourceScale
	// storageCodec writes objects in the storage version and reads them
	// in this version, converting with converter.
	StorageCodec runtime.Codec
	// converter converts between the CRD's versions (nil: strategy None,
	// only apiVersion changes).
	converter runtime.ObjectConvertor
	Fields    *CustomFieldManagers
}

// NewCustomResources makes the registry entries of a CRD's served
// versions (without storage, which the caller adds); staticDefs are the
// built-in OpenAPI definitions server-side apply needs besides the CRD's;
// converter converts between versions (nil: strategy None).
func NewCustomResources(crd *apiextensionsv1.CustomResourceDefinition, staticDefs map[string]*spec.Schema, converter runtime.ObjectConvertor) ([]*Resource, error) {
	storageVersion := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storageVersion = v.Name
		}
	}
	// Every version's schema, served or not: stored objects may be in
	// any of them.
	schemas := map[string]*apiextensions.JSONSchemaProps{}
	structurals := map[string]*structuralschema.Structural{}
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensions.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("%s %s: schema: %w", crd.Name, v.Name, err)
		}
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("%s %s: structural schema: %w", crd.Name, v.Name, err)
		}
		s = s.DeepCopy()
		if err := structuraldefaulting.PruneDefaults(s); err != nil {
			return nil, fmt.Errorf("%s %s: defaults: %w", crd.Name, v.Name, err)
		}
		schemas[v.Name], structurals[v.Name] = internal.OpenAPIV3Schema, s
	}
	names := crd.Status.AcceptedNames
	var out []*Resource
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		gv := schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name}
		cr := &CustomResource{
			CRD: crd, version: v.Name, converter: converter,
			StorageCodec: unstructuredStorageCodec{
				served: gv, stored: schema.GroupVersion{Group: crd.Spec.Group, Version: storageVersion}, converter: converter,
				kind: names.Kind, structurals: structurals, preserveUnknownFields: crd.Spec.PreserveUnknownFields,
			},
		}
		if s := structurals[v.Name]; s != nil {
			cr.structural = s
			// Compiled once per schema; nil when it has no CEL rules.
			cr.cel = apiextensionscel.NewValidator(s, true, celconfig.PerCallLimit)
			var err error
			if cr.validator, _, err = apiservervalidation.NewSchemaValidator(schemas[v.Name]); err != nil {
				return nil, fmt.Errorf("%s %s: validator: %w", crd.Name, v.Name, err)
			}
		}
		columns := v.AdditionalPrinterColumns
		if len(columns) == 0 {
			columns = []apiextensionsv1.CustomResourceColumnDefinition{{
				Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp",
				Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
			}}
		}
		var err error
		if cr.Table, err = tableconvertor.New(columns); err != nil {
			return nil, fmt.Errorf("%s %s: printer columns: %w", crd.Name, v.Name, err)
		}
		r := &Resource{
			GVK: gv.WithKind(names.Kind), Plural: names.Plural, Singular: names.Singular,
			ShortNames: names.ShortNames, Categories: names.Categories,
			Namespaced:    crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			StoragePrefix: "/" + crd.Spec.Group + "/" + names.Plural,
			Custom:        cr,
		}
		listGVK := gv.WithKind(names.ListKind)
		r.New = func() runtime.Object {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetGroupVersionKind(r.GVK)
			return u
		}
		r.NewList = func() runtime.Object {
			l := &unstructured.UnstructuredList{Object: map[string]any{}}
			l.SetGroupVersionKind(listGVK)
			return l
		}
		if sub := v.Subresources; sub != nil {
			r.Status = sub.Status != nil
			r.Scale = sub.Scale != nil
			cr.Scale = sub.Scale
		}
		if len(v.SelectableFields) > 0 {
			r.Fields = selectableFields(r, v.SelectableFields)
		}
		r.Admit = func(ctx context.Context, obj, old runtime.Object) error { return cr.admit(ctx, r, obj, old) }
		cr.Fields = newCustomFieldManagers(r, staticDefs)
		out = append(out, r)
	}
	// Served in Kubernetes' version order (v2 before v1beta1), so the
	// group's preferred version comes first.
	slices.SortStableFunc(out, func(a, b *Resource) int {
		return version.CompareKubeAwareVersionStrings(b.GVK.Version, a.GVK.Version)
	})
	return out, nil
}

// selectableFields returns the Fields of r, a version of a CRD with
// selectableFields: each one's JSONPath without its leading dot ("host"
// for .host) with the value found there, "" when there is none, as
// apiextensions-apiserver's strategy computes them (its GetAttrs). CRD
// validation admits only paths to scalars, so GetAttrs fails only on
// something that is not a custom resource, which then has no fields.
func selectableFields(r *Resource, fs []apiextensionsv1.SelectableField) func(runtime.Object) fields.Set {
	// Only GetAttrs is used: no typer, validators, schema or subresources.
	strategy := customresource.NewStrategy(nil, r.Namespaced, r.GVK, nil, nil, nil, nil, nil, fs)
	return func(obj runtime.Object) fields.Set {
		_, f, err := strategy.GetAttrs(obj)
		if err != nil {
			return nil
		}
		return f
	}
}

// admit prepares a custom resource for storage as kube-apiserver does:
// status dropped on create when it is a subresource, unknown fields pruned
// (unless the schema preserves them), defaults from the schema applied,
// then the object validated against the schema (422 with the field
// errors). Without a status subresource a status change moves the
// generation too.
func (cr *CustomResource) admit(ctx context.Context, r *Resource, obj, old runtime.Object) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("custom resource is a %T", obj))
	}
	u.SetGroupVersionKind(r.GVK)
	if old == nil && r.Status {
		delete(u.Object, "status")
	}
	if s := cr.structural; s != nil {
		if !cr.CRD.Spec.PreserveUnknownFields {
			structuralpruning.Prune(u.Object, s, true)
			structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, s)
		}
		structuraldefaulting.Default(u.Object, s)
		if err := schemaobjectmeta.Coerce(nil, u.Object, s, true, false); err != nil {
			return apierrors.NewInvalid(r.GVK.GroupKind(), u.GetName(), field.ErrorList{err})
		}
	}
	var errs field.ErrorList
	if cr.validator != nil {
		if old == nil {
			errs = apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), cr.validator)
		} else {
			errs = apiservervalidation.ValidateCustomResourceUpdate(nil, u.UnstructuredContent(), old.(*unstructured.Unstructured).UnstructuredContent(), cr.validator)
		}
	}
	if cr.structural != nil {
		errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, cr.structural, true)...)
	}
	if cr.cel != nil && len(errs) == 0 {
		// x-kubernetes-validations rules, within kube-apiserver's cost
		// budget; transition rules see the old object.
		var oldObj any
		if o, ok := old.(*unstructured.Unstructured); ok {
			oldObj = o.Object
		}
		celErrs, _ := cr.cel.Validate(ctx, nil, cr.structural, u.Object, oldObj, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(r.GVK.GroupKind(), u.GetName(), errs)
	}
	if o, ok := old.(*unstructured.Unstructured); ok && !r.Status && u.GetGeneration() == o.GetGeneration() &&
		!apiequality.Semantic.DeepEqual(ContentWithout(u, "metadata"), ContentWithout(o, "metadata")) {
		u.SetGeneration(o.GetGeneration() + 1)
	}
	return nil
}

// Prune drops the fields a custom resource's schema does not know (unless
// it preserves them), as kube-apiserver does when it decodes a request
// body, so managedFields never name them, and returns the errors
// fieldValidation reports for them (`unknown field "spec.foo"`). It does
// nothing on a nil receiver (built-in resources) or without a schema.
func (cr *CustomResource) Prune(obj runtime.Object) []error {
	u, ok := obj.(*unstructured.Unstructured)
	if cr == nil || !ok || cr.structural == nil || cr.CRD.Spec.PreserveUnknownFields {
		return nil
	}
	paths := structuralpruning.PruneWithOptions(u.Object, cr.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	errs := make([]error, 0, len(paths))
	for _, p := range paths {
		errs = append(errs, fmt.Errorf("unknown field %q", p))
	}
	return errs
}

// unstructuredStorageCodec stores custom resources as JSON in the CRD's
// storage version and reads them in the served one: with a converter
// (strategy Webhook) objects in another version are converted, else
// (strategy None) only apiVersion changes. As kube-apiserver's storage
// codec, it reads an object with the schema of the version it is stored
// in, before converting it: unknown fields pruned (unless the CRD
// preserves them) and the schema's defaults applied, so objects stored
// before their schema gained a default come back defaulted.
type unstructuredStorageCodec struct {
	served, stored schema.GroupVersion
	converter      runtime.ObjectConvertor
	// kind is the CRD's kind; structurals are its versions' schemas
	// (defaults pruned of unknown fields), by version.
	kind                  string
	structurals           map[string]*structuralschema.Structural
	preserveUnknownFields bool
}

func (c unstructuredStorageCodec) Encode(obj runtime.Object, w io.Writer) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("custom resource storage: cannot encode a %T", obj)
	}
	out := &unstructured.Unstructured{Object: maps.Clone(u.Object)}
	if c.converter != nil && u.GetAPIVersion() != c.stored.String() {
		converted, err := c.converter.ConvertToVersion(u, c.stored)
		if err != nil {
			return err
		}
		if out, ok = converted.(*unstructured.Unstructured); !ok {
			return fmt.Errorf("custom resource storage: conversion made a %T", converted)
		}
	}
	out.SetAPIVersion(c.stored.String())
	return unstructured.UnstructuredJSONScheme.Encode(out, w)
}

func (c unstructuredStorageCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := unstructured.UnstructuredJSONScheme.Decode(data, defaults, into)
	if err != nil {
		return nil, gvk, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || !strings.HasPrefix(u.GetAPIVersion(), c.served.Group+"/") {
		return obj, gvk, nil
	}
	c.coerce(u)
	if u.GetAPIVersion() == c.served.String() {
		return obj, gvk, nil
	}
	if c.converter == nil {
		u.SetAPIVersion(c.served.String())
	} else {
		converted, err := c.converter.ConvertToVersion(u, c.served)
		if err != nil {
			return nil, gvk, err
		}
		cu, ok := converted.(*unstructured.Unstructured)
		if !ok {
			return nil, gvk, fmt.Errorf("custom resource storage: conversion made a %T", converted)
		}
		u.Object = cu.Object // into, when given, is u
	}
	g := u.GroupVersionKind()
	return u, &g, nil
}

// coerce prunes and defaults u, one of the CRD's objects read from
// storage, with the schema of its version (apiextensions-apiserver's
// schemaCoercingDecoder and unstructuredDefaulter do the same).
func (c unstructuredStorageCodec) coerce(u *unstructured.Unstructured) {
	gvk := u.GroupVersionKind()
	s := c.structurals[gvk.Version]
	if gvk.Kind != c.kind || s == nil {
		return
	}
	if !c.preserveUnknownFields {
		structuralpruning.Prune(u.Object, s, true)
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, s)
	}
	structuraldefaulting.Default(u.Object, s)
}

func (c unstructuredStorageCodec) Identifier() runtime.Identifier {
	return runtime.Identifier("sqlkube-custom-resource-json-" + c.served.String())
}

// ContentWithout is u's content without the given top-level keys (a
// shallow copy).
func ContentWithout(u *unstructured.Unstructured, keys ...string) map[string]any {
	out := make(map[string]any, len(u.Object))
	for k, v := range u.Object {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}
