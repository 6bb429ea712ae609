package openapi

import (
	"sort"
	"strings"

	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// v3Schema converts a generated (v2) schema into its OpenAPI 3 form: refs
// point to #/components/schemas/, and a $ref that has siblings (description,
// extensions, ...) is wrapped in a single-element allOf, because OpenAPI 3.0
// ignores the siblings of $ref. The input is not modified.
func v3Schema(s spec.Schema) spec.Schema {
	if ref := s.Ref.String(); ref != "" {
		target := spec.Schema{SchemaProps: spec.SchemaProps{
			Ref: spec.MustCreateRef(v3RefPrefix + strings.TrimPrefix(ref, v2RefPrefix)),
		}}
		s.Ref = spec.Ref{}
		if s.Description == "" && s.Default == nil && len(s.Extensions) == 0 && len(s.Type) == 0 {
			return target
		}
		s.AllOf = []spec.Schema{target}
		return s
	}
	if s.Items != nil && s.Items.Schema != nil {
		item := v3Schema(*s.Items.Schema)
		s.Items = &spec.SchemaOrArray{Schema: &item}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		value := v3Schema(*s.AdditionalProperties.Schema)
		s.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: &value}
	}
	if len(s.Properties) > 0 {
		props := make(map[string]spec.Schema, len(s.Properties))
		for name, p := range s.Properties {
			props[name] = v3Schema(p)
		}
		s.Properties = props
	}
	s.AllOf = v3Schemas(s.AllOf)
	s.OneOf = v3Schemas(s.OneOf)
	s.AnyOf = v3Schemas(s.AnyOf)
	return s
}

func v3Schemas(in []spec.Schema) []spec.Schema {
	if in == nil {
		return nil
	}
	out := make([]spec.Schema, len(in))
	for i, s := range in {
		out[i] = v3Schema(s)
	}
	return out
}

// schemaRefs returns the definition names s references directly or through
// its nested schemas.
func schemaRefs(s *spec.Schema, out map[string]bool) {
	if ref := s.Ref.String(); ref != "" {
		out[strings.TrimPrefix(ref, v2RefPrefix)] = true
	}
	if s.Items != nil && s.Items.Schema != nil {
		schemaRefs(s.Items.Schema, out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		schemaRefs(s.AdditionalProperties.Schema, out)
	}
	for _, p := range s.Properties {
		schemaRefs(&p, out)
	}
	for _, list := range [][]spec.Schema{s.AllOf, s.OneOf, s.AnyOf} {
		for i := range list {
			schemaRefs(&list[i], out)
		}
	}
}

// closure returns the given definition names plus every definition they
// reference transitively, sorted.
func closure(roots map[string]bool, defs map[string]*spec.Schema) []string {
	seen := map[string]bool{}
	queue := make([]string, 0, len(roots))
	for name := range roots {
		queue = append(queue, name)
	}
	for len(queue) > 0 {
		name := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if seen[name] {
			continue
		}
		seen[name] = true
		refs := map[string]bool{}
		if def := defs[name]; def != nil {
			schemaRefs(def, refs)
		}
		for r := range refs {
			if !seen[r] {
				queue = append(queue, r)
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// v3Content returns one media type entry per type, each referencing def.
func v3Content(def string, types []string) map[string]*spec3.MediaType {
	content := make(map[string]*spec3.MediaType, len(types))
	for _, t := range types {
		s := spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef(v3RefPrefix + def)}}
		content[t] = &spec3.MediaType{MediaTypeProps: spec3.MediaTypeProps{Schema: &s}}
	}
	return content
}

func v3Params(ps []param) []*spec3.Parameter {
	if len(ps) == 0 {
		return nil
	}
	out := make([]*spec3.Parameter, 0, len(ps))
	for _, p := range ps {
		s := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{p.typ}, UniqueItems: true}}
		out = append(out, &spec3.Parameter{ParameterProps: spec3.ParameterProps{
			Name: p.name, In: p.in, Description: p.description, Required: p.required, Schema: &s,
		}})
	}
	return out
}

// v3Operation renders op as an OpenAPI 3 operation.
func v3Operation(op *operation) *spec3.Operation {
	o := &spec3.Operation{}
	o.OperationId = op.id
	o.Description = op.description
	o.Tags = []string{op.tag}
	o.Parameters = v3Params(op.params)
	if op.body != "" {
		o.RequestBody = &spec3.RequestBody{RequestBodyProps: spec3.RequestBodyProps{
			Content: v3Content(op.body, op.consumes), Required: op.bodyRequired,
		}}
	}
	o.Responses = &spec3.Responses{ResponsesProps: spec3.ResponsesProps{StatusCodeResponses: map[int]*spec3.Response{}}}
	for _, r := range op.responses {
		resp := &spec3.Response{ResponseProps: spec3.ResponseProps{Description: r.description}}
		if r.schema != "" {
			resp.Content = v3Content(r.schema, op.produces)
		}
		o.Responses.StatusCodeResponses[r.code] = resp
	}
	if op.action != "" {
		o.AddExtension(extAction, op.action)
	}
	if op.gvk != nil {
		o.AddExtension(extGVK, gvkExtension(op))
	}
	return o
}

// v3Document assembles the OpenAPI 3 document of the routes in paths: their
// operations and every schema they reference, transitively.
func v3Document(info Info, rt *routeTable, paths []string, defs map[string]*spec.Schema) *spec3.OpenAPI {
	doc := &spec3.OpenAPI{
		Version: "3.0.0",
		Info:    &spec.Info{InfoProps: spec.InfoProps{Title: info.Title, Version: info.Version}},
		Paths:   &spec3.Paths{Paths: map[string]*spec3.Path{}},
	}
	used := map[string]bool{}
	for _, path := range paths {
		r := rt.routes[path]
		item := &spec3.Path{}
		item.Parameters = v3Params(r.params)
		for i := range r.ops {
			op := &r.ops[i]
			if op.body != "" {
				used[op.body] = true
			}
			for _, resp := range op.responses {
				if resp.schema != "" {
					used[resp.schema] = true
				}
			}
			o := v3Operation(op)
			switch op.method {
			case "get":
				item.Get = o
			case "put":
				item.Put = o
			case "post":
				item.Post = o
			case "patch":
				item.Patch = o
			case "delete":
				item.Delete = o
			}
		}
		doc.Paths.Paths[path] = item
	}
	schemas := map[string]*spec.Schema{}
	for _, name := range closure(used, defs) {
		if def := defs[name]; def != nil {
			s := v3Schema(*def)
			schemas[name] = &s
		}
	}
	doc.Components = &spec3.Components{
		Schemas: schemas,
		SecuritySchemes: spec3.SecuritySchemes{"BearerToken": &spec3.SecurityScheme{
			SecuritySchemeProps: spec3.SecuritySchemeProps{
				Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication",
			},
		}},
	}
	return doc
}
