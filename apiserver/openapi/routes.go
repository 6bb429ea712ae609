package openapi

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// response is one documented response of an operation.
type response struct {
	code        int
	description string
	schema      string // definition name of the body, "" for none
}

// operation is a version-neutral description of one HTTP operation; it is
// rendered both as Swagger 2.0 (v2.go) and OpenAPI 3 (v3.go).
type operation struct {
	method       string // "get", "put", "post", "patch" or "delete"
	id           string
	description  string
	action       string                   // x-kubernetes-action; "" for none
	gvk          *schema.GroupVersionKind // x-kubernetes-group-version-kind; nil for none
	tag          string
	params       []param // query parameters specific to the operation
	body         string  // definition name of the request body, "" for none
	bodyRequired bool
	consumes     []string
	produces     []string
	responses    []response
}

// route is one URL path with its operations.
type route struct {
	path   string
	gv     schema.GroupVersion
	params []param // parameters shared by all operations (path params, pretty)
	ops    []operation
}

// metaDefs are the definition names of the meta/v1 types that paths use.
type metaDefs struct {
	status, deleteOptions, watchEvent, patch, apiResourceList string
}

// routeTable accumulates routes keyed by path.
type routeTable struct {
	routes map[string]*route
	meta   metaDefs
}

func newRouteTable(meta metaDefs) *routeTable {
	return &routeTable{routes: map[string]*route{}, meta: meta}
}

// add registers op on path, creating the route with pathParams if needed.
func (rt *routeTable) add(gv schema.GroupVersion, path string, pathParams []param, op operation) error {
	r := rt.routes[path]
	if r == nil {
		r = &route{path: path, gv: gv, params: append([]param{}, pathParams...)}
		rt.routes[path] = r
	} else if r.gv != gv {
		return fmt.Errorf("openapi: path %s is served by both %s and %s", path, r.gv, gv)
	}
	for _, have := range r.ops {
		if have.method == op.method {
			return fmt.Errorf("openapi: duplicate operation %s %s", op.method, path)
		}
	}
	op.tag = operationTag(gv)
	r.ops = append(r.ops, op)
	return nil
}

// finish hoists the parameters of GET-only paths (watch and all-namespace
// lists) to the path level, as upstream does, and sorts everything.
func (rt *routeTable) finish() {
	for _, r := range rt.routes {
		if len(r.ops) == 1 && r.ops[0].method == "get" {
			r.params = append(r.params, r.ops[0].params...)
			r.ops[0].params = nil
		}
		sortParams(r.params)
		for i := range r.ops {
			sortParams(r.ops[i].params)
		}
		sort.Slice(r.ops, func(i, j int) bool { return r.ops[i].method < r.ops[j].method })
	}
}

// sortedPaths returns the route paths in lexical order.
func (rt *routeTable) sortedPaths() []string {
	paths := make([]string, 0, len(rt.routes))
	for p := range rt.routes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// okResponses returns the given status codes, each with body def.
func okResponses(def string, codes ...int) []response {
	text := map[int]string{200: "OK", 201: "Created", 202: "Accepted"}
	var rs []response
	for _, c := range codes {
		rs = append(rs, response{code: c, description: text[c], schema: def})
	}
	return append(rs, response{code: 401, description: "Unauthorized"})
}

// addGroupVersion adds GET /api/v1/ (or /apis/GROUP/VERSION/), the
// APIResourceList of a group-version.
func (rt *routeTable) addGroupVersion(gv schema.GroupVersion) error {
	return rt.add(gv, gvURLPrefix(gv)+"/", nil, operation{
		method:      "get",
		id:          "get" + operationPrefix(gv) + "APIResources",
		description: "get available resources",
		consumes:    producesObject,
		produces:    producesObject,
		responses:   okResponses(rt.meta.apiResourceList, 200),
	})
}
