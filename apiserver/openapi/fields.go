package openapi

import (
	"reflect"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
)

var typeMetaType = reflect.TypeFor[metav1.TypeMeta]()

// kindOptionalFields are never listed as required on top-level kinds (types
// that embed metav1.TypeMeta), as upstream does.
var kindOptionalFields = map[string]bool{
	"apiVersion": true, "kind": true, "metadata": true, "spec": true, "status": true,
}

// upstreamRequired is the required fields of each type kube-apiserver
// publishes, by definition name ("io.k8s.api.core.v1.PodSpec"; since 1.37
// the generated definitions are keyed so, by OpenAPIModelName, where they
// were keyed by Go type, "k8s.io/api/core/v1.PodSpec"): which fields are
// required is written in comments (+optional), which reflection cannot
// read; the json tags' omitempty (what structSchema goes by otherwise)
// says only how a field is encoded.
var upstreamRequired = sync.OnceValue(func() map[string][]string {
	defs := generatedopenapi.GetOpenAPIDefinitions(func(string) spec.Ref { return spec.Ref{} })
	out := make(map[string][]string, len(defs))
	for name, def := range defs {
		if strings.Contains(name, "/") {
			name = friendlyName(name)
		}
		out[name] = def.Schema.Required
	}
	return out
})

// structSchema returns the object schema of struct type t. owner is the name
// of the definition the properties belong to (used for override look-ups).
func (g *schemaGen) structSchema(owner string, t reflect.Type) (spec.Schema, error) {
	s := primitive("object", "")
	props := map[string]spec.Schema{}
	var required []string
	if err := g.collectFields(owner, t, props, &required); err != nil {
		return spec.Schema{}, err
	}
	if len(props) > 0 {
		s.Properties = props
	}
	if req, ok := upstreamRequired()[definitionName(t)]; ok {
		s.Required = req
		return s, nil
	}
	isKind := embedsTypeMeta(t)
	for _, name := range required {
		if isKind && kindOptionalFields[name] {
			continue
		}
		s.Required = append(s.Required, name)
	}
	return s, nil
}

// embedsTypeMeta reports whether struct t embeds metav1.TypeMeta.
func embedsTypeMeta(t reflect.Type) bool {
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.Anonymous && f.Type == typeMetaType {
			return true
		}
	}
	return false
}

// collectFields adds the JSON properties of struct t to props, following the
// encoding/json rules that matter for API types: "-" skips a field, an
// embedded struct without a json name (",inline") has its fields promoted,
// and fields declared directly win over promoted ones.
func (g *schemaGen) collectFields(owner string, t reflect.Type, props map[string]spec.Schema, required *[]string) error {
	docs := swaggerDoc(t)
	var embedded []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts := jsonTag(f)
		if name == "-" && len(opts) == 0 {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := props[name]; dup {
			continue
		}
		ps, err := g.typeSchema(owner, f.Type)
		if err != nil {
			return err
		}
		ps.Description = docs[name]
		applyFieldExtensions(owner, name, f, &ps)
		props[name] = ps
		if !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") && f.Type.Kind() != reflect.Pointer {
			*required = append(*required, name)
		}
	}
	for _, et := range embedded {
		if err := g.collectFields(owner, et, props, required); err != nil {
			return err
		}
	}
	return nil
}

// applyFieldExtensions sets the strategic-merge-patch and list-type
// extensions of property name of definition owner from the field's struct
// tags, then applies the override table for the cases reflection cannot see.
func applyFieldExtensions(owner, name string, f reflect.StructField, ps *spec.Schema) {
	strategy := f.Tag.Get("patchStrategy")
	key := f.Tag.Get("patchMergeKey")
	if strategy != "" {
		ps.AddExtension(extPatchStrategy, strategy)
	}
	if key != "" {
		ps.AddExtension(extPatchMergeKey, key)
	}
	if ps.Type.Contains("array") && hasOpt(strings.Split(strategy, ","), "merge") {
		switch {
		case key != "":
			ps.AddExtension(extListType, "map")
			ps.AddExtension(extListMapKeys, []interface{}{key})
		case isScalar(ps.Items.Schema):
			ps.AddExtension(extListType, "set")
		}
	}
	if ov, ok := fieldOverrides[owner+"."+name]; ok {
		ov.apply(ps)
	}
}

// isScalar reports whether s is an inline schema of a scalar type.
func isScalar(s *spec.Schema) bool {
	if s == nil || s.Ref.String() != "" || len(s.Type) == 0 {
		return false
	}
	return !s.Type.Contains("object") && !s.Type.Contains("array")
}
