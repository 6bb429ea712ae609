package openapi

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Extension keys used in the generated schemas and operations.
const (
	extGVK             = "x-kubernetes-group-version-kind"
	extAction          = "x-kubernetes-action"
	extPatchStrategy   = "x-kubernetes-patch-strategy"
	extPatchMergeKey   = "x-kubernetes-patch-merge-key"
	extListType        = "x-kubernetes-list-type"
	extListMapKeys     = "x-kubernetes-list-map-keys"
	extMapType         = "x-kubernetes-map-type"
	extPreserveUnknown = "x-kubernetes-preserve-unknown-fields"
	extIntOrString     = "x-kubernetes-int-or-string"
)

// swaggerDocer is implemented (with a value receiver) by the k8s.io/api and
// apimachinery types; key "" is the type's description, other keys are json
// field names.
type swaggerDocer interface{ SwaggerDoc() map[string]string }

// openAPITyper and openAPIFormatter are implemented by apimachinery types
// with a custom JSON form (Time, Quantity, IntOrString, ...).
type openAPITyper interface{ OpenAPISchemaType() []string }
type openAPIFormatter interface{ OpenAPISchemaFormat() string }

var (
	swaggerDocerType = reflect.TypeFor[swaggerDocer]()
	typerType        = reflect.TypeFor[openAPITyper]()
	formatterType    = reflect.TypeFor[openAPIFormatter]()
	timeType         = reflect.TypeFor[time.Time]()
	unstructuredType = reflect.TypeFor[runtime.Unstructured]()
)

// schemaGen turns Go types into Swagger 2.0 definitions by reflection.
// Named struct types (and types with an OpenAPISchemaType method) become
// definitions referenced by "#/definitions/NAME"; everything else is inlined.
type schemaGen struct {
	defs    map[string]*spec.Schema
	types   map[string]reflect.Type // definition name -> Go type (detects clashes)
	pending []reflect.Type
	gvks    map[string][]schema.GroupVersionKind
}

func newSchemaGen() *schemaGen {
	return &schemaGen{
		defs:  map[string]*spec.Schema{},
		types: map[string]reflect.Type{},
		gvks:  map[string][]schema.GroupVersionKind{},
	}
}

// isDefinition reports whether t gets a definition of its own.
func isDefinition(t reflect.Type) bool {
	if t.Name() == "" || t.PkgPath() == "" || t == timeType {
		return false
	}
	return t.Kind() == reflect.Struct || implements(t, typerType)
}

// implements reports whether t or *t implements iface.
func implements(t reflect.Type, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// instance returns a value of t (or *t) that implements iface.
func instance(t reflect.Type, iface reflect.Type) any {
	if t.Implements(iface) {
		return reflect.Zero(t).Interface()
	}
	return reflect.New(t).Interface()
}

// swaggerDoc returns the SwaggerDoc map of t, or nil.
func swaggerDoc(t reflect.Type) map[string]string {
	if !implements(t, swaggerDocerType) {
		return nil
	}
	return instance(t, swaggerDocerType).(swaggerDocer).SwaggerDoc()
}

// ref registers the named type t (pointers are dereferenced) and returns its
// definition name; the definition itself is built by run.
func (g *schemaGen) ref(t reflect.Type) (string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !isDefinition(t) || strings.ContainsAny(t.Name(), "[], ") {
		return "", fmt.Errorf("openapi: type %v cannot be a definition", t)
	}
	name := definitionName(t)
	if prev, ok := g.types[name]; ok {
		if prev != t {
			return "", fmt.Errorf("openapi: types %v and %v both map to definition %q", prev, t, name)
		}
		return name, nil
	}
	g.types[name] = t
	g.pending = append(g.pending, t)
	return name, nil
}

// addGVK records that the definition name is served as gvk.
func (g *schemaGen) addGVK(name string, gvk schema.GroupVersionKind) {
	for _, have := range g.gvks[name] {
		if have == gvk {
			return
		}
	}
	g.gvks[name] = append(g.gvks[name], gvk)
}

// run builds the definitions of all registered types and of every type they
// reference, then attaches the x-kubernetes-group-version-kind extensions.
func (g *schemaGen) run() error {
	for len(g.pending) > 0 {
		t := g.pending[0]
		g.pending = g.pending[1:]
		name := definitionName(t)
		def, err := g.definition(name, t)
		if err != nil {
			return err
		}
		g.defs[name] = def
	}
	for name, list := range g.gvks {
		sort.Slice(list, func(i, j int) bool {
			a, b := list[i], list[j]
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Version != b.Version {
				return a.Version < b.Version
			}
			return a.Kind < b.Kind
		})
		ext := make([]interface{}, 0, len(list))
		for _, gvk := range list {
			ext = append(ext, map[string]interface{}{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind})
		}
		g.defs[name].AddExtension(extGVK, ext)
	}
	return nil
}

// definition builds the schema of the named type t.
func (g *schemaGen) definition(name string, t reflect.Type) (*spec.Schema, error) {
	var s spec.Schema
	if implements(t, unstructuredType) {
		// Unstructured content (e.g. custom resources): any JSON object.
		s = preserveUnknown()
	} else if implements(t, typerType) {
		// Custom JSON form declared by the type itself (Time, Quantity, ...).
		if types := instance(t, typerType).(openAPITyper).OpenAPISchemaType(); len(types) > 0 {
			s.Type = spec.StringOrArray(types)
		}
		if implements(t, formatterType) {
			s.Format = instance(t, formatterType).(openAPIFormatter).OpenAPISchemaFormat()
		}
		if s.Format == "int-or-string" {
			s.AddExtension(extIntOrString, true)
		}
	} else {
		var err error
		if s, err = g.structSchema(name, t); err != nil {
			return nil, err
		}
	}
	s.Description = swaggerDoc(t)[""]
	if s.Description == "" {
		s.Description = builtinDescriptions[name]
	}
	applyTypeOverride(name, &s)
	return &s, nil
}

// typeSchema returns the (inline or $ref) schema of a value of Go type t.
// owner is the definition being built, for error messages.
func (g *schemaGen) typeSchema(owner string, t reflect.Type) (spec.Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return primitive("string", "date-time"), nil
	}
	if isDefinition(t) {
		name, err := g.ref(t)
		if err != nil {
			return spec.Schema{}, err
		}
		return refSchema(name), nil
	}
	switch t.Kind() {
	case reflect.String:
		return primitive("string", ""), nil
	case reflect.Bool:
		return primitive("boolean", ""), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return primitive("integer", "int32"), nil
	case reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return primitive("integer", "int64"), nil
	case reflect.Float32:
		return primitive("number", "float"), nil
	case reflect.Float64:
		return primitive("number", "double"), nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return primitive("string", "byte"), nil
		}
		item, err := g.typeSchema(owner, t.Elem())
		if err != nil {
			return spec.Schema{}, err
		}
		s := primitive("array", "")
		s.Items = &spec.SchemaOrArray{Schema: &item}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return preserveUnknown(), nil
		}
		value, err := g.typeSchema(owner, t.Elem())
		if err != nil {
			return spec.Schema{}, err
		}
		s := primitive("object", "")
		s.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: &value}
		return s, nil
	case reflect.Interface:
		return preserveUnknown(), nil
	case reflect.Struct:
		// An anonymous struct: inline its properties.
		return g.structSchema(owner, t)
	}
	return spec.Schema{}, fmt.Errorf("openapi: %s: unsupported Go type %v", owner, t)
}

// primitive returns a schema with the given type and format.
func primitive(typ, format string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{typ}, Format: format}}
}

// preserveUnknown is the schema of an arbitrary JSON object.
func preserveUnknown() spec.Schema {
	s := primitive("object", "")
	s.AddExtension(extPreserveUnknown, true)
	return s
}

// refSchema returns {"$ref": "#/definitions/NAME"}.
func refSchema(name string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef(v2RefPrefix + name)}}
}

// jsonTag splits a json struct tag into its name and options.
func jsonTag(f reflect.StructField) (name string, opts []string) {
	tag, ok := f.Tag.Lookup("json")
	if !ok {
		return "", nil
	}
	parts := strings.Split(tag, ",")
	return parts[0], parts[1:]
}

func hasOpt(opts []string, opt string) bool {
	for _, o := range opts {
		if o == opt {
			return true
		}
	}
	return false
}
