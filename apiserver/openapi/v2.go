package openapi

import (
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// gvkExtension renders an operation's x-kubernetes-group-version-kind (a
// single object, unlike the list definitions carry).
func gvkExtension(op *operation) map[string]interface{} {
	return map[string]interface{}{"group": op.gvk.Group, "version": op.gvk.Version, "kind": op.gvk.Kind}
}

// v2Param renders a path or query parameter.
func v2Param(p param) spec.Parameter {
	var sp spec.Parameter
	sp.Name = p.name
	sp.In = p.in
	sp.Description = p.description
	sp.Required = p.required
	sp.Type = p.typ
	sp.UniqueItems = true
	return sp
}

func v2Params(ps []param) []spec.Parameter {
	if len(ps) == 0 {
		return nil
	}
	out := make([]spec.Parameter, 0, len(ps))
	for _, p := range ps {
		out = append(out, v2Param(p))
	}
	return out
}

// v2RefSchema returns a pointer to {"$ref": "#/definitions/NAME"}.
func v2RefSchema(name string) *spec.Schema {
	s := refSchema(name)
	return &s
}

// v2Operation renders op as a Swagger 2.0 operation.
func v2Operation(op *operation) *spec.Operation {
	o := &spec.Operation{}
	o.ID = op.id
	o.Description = op.description
	o.Consumes = op.consumes
	o.Produces = op.produces
	o.Schemes = []string{"https"}
	o.Tags = []string{op.tag}
	if op.body != "" {
		var body spec.Parameter
		body.Name = "body"
		body.In = "body"
		body.Required = op.bodyRequired
		body.Schema = v2RefSchema(op.body)
		o.Parameters = append(o.Parameters, body)
	}
	o.Parameters = append(o.Parameters, v2Params(op.params)...)
	o.Responses = &spec.Responses{ResponsesProps: spec.ResponsesProps{StatusCodeResponses: map[int]spec.Response{}}}
	for _, r := range op.responses {
		var resp spec.Response
		resp.Description = r.description
		if r.schema != "" {
			resp.Schema = v2RefSchema(r.schema)
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

// v2Swagger assembles the whole Swagger 2.0 document.
func v2Swagger(info Info, rt *routeTable, defs map[string]*spec.Schema) *spec.Swagger {
	sw := &spec.Swagger{}
	sw.Swagger = "2.0"
	sw.Info = &spec.Info{InfoProps: spec.InfoProps{Title: info.Title, Version: info.Version}}
	sw.Paths = &spec.Paths{Paths: map[string]spec.PathItem{}}
	for _, path := range rt.sortedPaths() {
		r := rt.routes[path]
		var item spec.PathItem
		item.Parameters = v2Params(r.params)
		for i := range r.ops {
			op := &r.ops[i]
			o := v2Operation(op)
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
		sw.Paths.Paths[path] = item
	}
	sw.Definitions = spec.Definitions{}
	for name, s := range defs {
		sw.Definitions[name] = *s
	}
	sw.SecurityDefinitions = spec.SecurityDefinitions{
		"BearerToken": &spec.SecurityScheme{SecuritySchemeProps: spec.SecuritySchemeProps{
			Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication",
		}},
	}
	sw.Security = []map[string][]string{{"BearerToken": {}}}
	return sw
}
