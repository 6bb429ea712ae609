package openapi

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"reflect"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Resource describes one served resource (and its subresources).
type Resource struct {
	GVK          schema.GroupVersionKind // e.g. apps/v1 Deployment; Group "" for core
	ListKind     string                  // e.g. "DeploymentList"; defaults to Kind+"List"
	Plural       string                  // e.g. "deployments"
	Namespaced   bool
	Verbs        []string       // subset of get,list,watch,create,update,patch,delete,deletecollection
	Object       runtime.Object // a zero value of the Go type, e.g. &appsv1.Deployment{}
	List         runtime.Object // e.g. &appsv1.DeploymentList{}; required with the list verb
	Subresources []Subresource
}

// Subresource describes one subresource of a Resource.
type Subresource struct {
	Name   string                  // "status", "scale", "binding", "eviction", ...
	Verbs  []string                // subset of get, update, patch, create, delete
	GVK    schema.GroupVersionKind // kind exchanged; defaults to the parent's GVK
	Object runtime.Object          // zero value of that kind's Go type; defaults to the parent's
}

// Info is the title and version put in every document's info section.
type Info struct{ Title, Version string }

// Builder holds the documents, built once by NewBuilder. All its methods are
// safe for concurrent use; the byte slices and schemas they return are shared
// and must not be modified.
type Builder struct {
	v2      []byte
	v3      map[string]v3Doc // keyed by "api/v1", "apis/apps/v1", ...
	v3Index []byte
	defs    map[string]*spec.Schema
}

// v3Doc is one serialized group-version document and its hash.
type v3Doc struct {
	body []byte
	hash string
}

var resourceVerbs = map[string]bool{
	"get": true, "list": true, "watch": true, "create": true, "update": true,
	"patch": true, "delete": true, "deletecollection": true,
}

// NewBuilder generates the schemas and paths of resources and serializes the
// v2 document, the v3 documents and the v3 index.
func NewBuilder(resources []Resource, info Info) (*Builder, error) {
	res, err := normalize(resources)
	if err != nil {
		return nil, err
	}
	g := newSchemaGen()
	meta, err := registerMeta(g, res)
	if err != nil {
		return nil, err
	}
	defs := make([]resourceDefs, len(res))
	for i := range res {
		if defs[i], err = registerResource(g, &res[i]); err != nil {
			return nil, err
		}
	}
	if err := g.run(); err != nil {
		return nil, err
	}

	rt := newRouteTable(meta)
	for _, gv := range servedGroupVersions(res) {
		if err := rt.addGroupVersion(gv); err != nil {
			return nil, err
		}
	}
	for i := range res {
		if err := rt.addResource(&res[i], defs[i]); err != nil {
			return nil, err
		}
	}
	rt.finish()

	b := &Builder{defs: g.defs, v3: map[string]v3Doc{}}
	if b.v2, err = json.Marshal(v2Swagger(info, rt, g.defs)); err != nil {
		return nil, fmt.Errorf("openapi: marshal v2: %w", err)
	}
	byGV := map[schema.GroupVersion][]string{}
	for _, p := range rt.sortedPaths() {
		gv := rt.routes[p].gv
		byGV[gv] = append(byGV[gv], p)
	}
	index := map[string]map[string]string{}
	for gv, paths := range byGV {
		body, err := json.Marshal(v3Document(info, rt, paths, g.defs))
		if err != nil {
			return nil, fmt.Errorf("openapi: marshal v3 %s: %w", gv, err)
		}
		key := gvDocPath(gv)
		doc := v3Doc{body: body, hash: fmt.Sprintf("%X", sha512.Sum512(body))}
		b.v3[key] = doc
		u := url.URL{Path: path.Join("/openapi/v3", key), RawQuery: url.Values{"hash": {doc.hash}}.Encode()}
		index[key] = map[string]string{"serverRelativeURL": u.String()}
	}
	if b.v3Index, err = json.Marshal(map[string]interface{}{"paths": index}); err != nil {
		return nil, fmt.Errorf("openapi: marshal v3 index: %w", err)
	}
	return b, nil
}

// V2JSON returns the whole Swagger 2.0 document (GET /openapi/v2).
func (b *Builder) V2JSON() []byte { return b.v2 }

// V3Index returns the body of GET /openapi/v3: for every group-version, the
// server-relative URL of its document with the document's hash.
func (b *Builder) V3Index() []byte { return b.v3Index }

// V3Doc returns the OpenAPI 3 document of a group-version path such as
// "api/v1" or "apis/apps/v1", its hash (uppercase hex SHA-512, as upstream),
// and whether the group-version is served.
func (b *Builder) V3Doc(path string) ([]byte, string, bool) {
	doc, ok := b.v3[path]
	return doc.body, doc.hash, ok
}

// Definitions returns the v2-style definitions (refs "#/definitions/NAME")
// for managedfields.NewTypeConverter. The map is a fresh copy; the schemas
// are shared and must not be modified.
func (b *Builder) Definitions() map[string]*spec.Schema {
	out := make(map[string]*spec.Schema, len(b.defs))
	for k, v := range b.defs {
		out[k] = v
	}
	return out
}

// normalize validates resources and returns a copy with defaults filled in.
func normalize(resources []Resource) ([]Resource, error) {
	out := make([]Resource, len(resources))
	seen := map[string]bool{}
	for i, r := range resources {
		if r.GVK.Version == "" || r.GVK.Kind == "" || r.Plural == "" || r.Object == nil {
			return nil, fmt.Errorf("openapi: resource %d (%s): GVK version and kind, Plural and Object are required", i, r.GVK)
		}
		key := r.GVK.GroupVersion().String() + "/" + r.Plural
		if seen[key] {
			return nil, fmt.Errorf("openapi: resource %s listed twice", key)
		}
		seen[key] = true
		for _, v := range r.Verbs {
			if !resourceVerbs[v] {
				return nil, fmt.Errorf("openapi: resource %s: unknown verb %q", key, v)
			}
			if v == "list" && r.List == nil {
				return nil, fmt.Errorf("openapi: resource %s: the list verb needs List", key)
			}
		}
		if r.ListKind == "" {
			r.ListKind = r.GVK.Kind + "List"
		}
		r.Verbs = append([]string{}, r.Verbs...)
		subs := make([]Subresource, len(r.Subresources))
		for j, s := range r.Subresources {
			if s.Name == "" {
				return nil, fmt.Errorf("openapi: resource %s: subresource %d has no name", key, j)
			}
			if s.GVK.Empty() {
				s.GVK = r.GVK
			}
			if s.Object == nil {
				s.Object = r.Object
			}
			s.Verbs = append([]string{}, s.Verbs...)
			subs[j] = s
		}
		r.Subresources = subs
		out[i] = r
	}
	return out, nil
}

// servedGroupVersions returns the group-versions of resources, sorted.
func servedGroupVersions(res []Resource) []schema.GroupVersion {
	set := map[schema.GroupVersion]bool{}
	for _, r := range res {
		set[r.GVK.GroupVersion()] = true
	}
	gvs := make([]schema.GroupVersion, 0, len(set))
	for gv := range set {
		gvs = append(gvs, gv)
	}
	sort.Slice(gvs, func(i, j int) bool { return gvs[i].String() < gvs[j].String() })
	return gvs
}

// registerMeta registers the meta/v1 types the paths use and their GVKs:
// Status and APIResourceList as core v1, DeleteOptions and WatchEvent once
// per served group-version (and core v1), as upstream lists them.
func registerMeta(g *schemaGen, res []Resource) (metaDefs, error) {
	var m metaDefs
	for _, x := range []struct {
		dst *string
		obj any
	}{
		{&m.status, metav1.Status{}},
		{&m.deleteOptions, metav1.DeleteOptions{}},
		{&m.watchEvent, metav1.WatchEvent{}},
		{&m.patch, metav1.Patch{}},
		{&m.apiResourceList, metav1.APIResourceList{}},
	} {
		name, err := g.ref(reflect.TypeOf(x.obj))
		if err != nil {
			return m, err
		}
		*x.dst = name
	}
	core := schema.GroupVersion{Version: "v1"}
	g.addGVK(m.status, core.WithKind("Status"))
	g.addGVK(m.apiResourceList, core.WithKind("APIResourceList"))
	for _, gv := range append([]schema.GroupVersion{core}, servedGroupVersions(res)...) {
		g.addGVK(m.deleteOptions, gv.WithKind("DeleteOptions"))
		g.addGVK(m.watchEvent, gv.WithKind("WatchEvent"))
	}
	return m, nil
}

// registerResource registers the types a resource exchanges and their GVKs.
func registerResource(g *schemaGen, r *Resource) (resourceDefs, error) {
	var d resourceDefs
	var err error
	if d.object, err = g.ref(reflect.TypeOf(r.Object)); err != nil {
		return d, err
	}
	g.addGVK(d.object, r.GVK)
	if r.List != nil {
		if d.list, err = g.ref(reflect.TypeOf(r.List)); err != nil {
			return d, err
		}
		g.addGVK(d.list, r.GVK.GroupVersion().WithKind(r.ListKind))
	}
	for _, s := range r.Subresources {
		name, err := g.ref(reflect.TypeOf(s.Object))
		if err != nil {
			return d, err
		}
		g.addGVK(name, s.GVK)
		d.subs = append(d.subs, name)
	}
	return d, nil
}
