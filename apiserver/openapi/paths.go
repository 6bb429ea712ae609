package openapi

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resourceDefs are the definition names a resource's operations exchange.
type resourceDefs struct {
	object string
	list   string   // "" when the resource has no list type
	subs   []string // one per Resource.Subresources entry
}

// scope holds what every operation of one resource shares.
type scope struct {
	rt       *routeTable
	gv       schema.GroupVersion
	gvk      schema.GroupVersionKind
	idPrefix string // e.g. "CoreV1"
	idScope  string // "Namespaced" or ""
	ns       []param
	kind     string
}

// id builds an operation id such as listCoreV1NamespacedPod.
func (s *scope) id(verb, infix, suffix string) string {
	return verb + s.idPrefix + infix + s.idScope + s.kind + suffix
}

func (s *scope) add(path string, pathParams []param, op operation) error {
	if op.gvk == nil {
		gvk := s.gvk
		op.gvk = &gvk
	}
	return s.rt.add(s.gv, path, pathParams, op)
}

// addResource adds the paths of one resource and its subresources, in the
// shapes upstream uses:
//
//	/api/v1/namespaces/{namespace}/pods            list, create, deletecollection
//	/api/v1/namespaces/{namespace}/pods/{name}     get, update, patch, delete
//	/api/v1/namespaces/{namespace}/pods/{name}/SUB subresource verbs
//	/api/v1/pods                                   list across namespaces
//	/api/v1/watch/...                              deprecated watch paths
func (rt *routeTable) addResource(r *Resource, defs resourceDefs) error {
	gv := r.GVK.GroupVersion()
	s := &scope{rt: rt, gv: gv, gvk: r.GVK, idPrefix: operationPrefix(gv), kind: r.GVK.Kind}
	prefix := gvURLPrefix(gv)
	nsPrefix := prefix
	if r.Namespaced {
		s.idScope = "Namespaced"
		s.ns = []param{namespaceParam}
		nsPrefix = prefix + "/namespaces/{namespace}"
	}
	collection := nsPrefix + "/" + r.Plural
	item := collection + "/{name}"
	collParams := append(append([]param{}, s.ns...), prettyParam)
	itemParams := append([]param{nameParam(r.GVK.Kind)}, collParams...)
	kind := r.GVK.Kind

	for _, verb := range r.Verbs {
		var err error
		switch verb {
		case "list":
			err = s.add(collection, collParams, operation{method: "get", id: s.id("list", "", ""),
				description: "list or watch objects of kind " + kind, action: "list",
				params: listParams(), consumes: consumesAnything, produces: producesWatch,
				responses: okResponses(defs.list, 200)})
			if err == nil && r.Namespaced {
				all := &scope{rt: rt, gv: gv, gvk: r.GVK, idPrefix: s.idPrefix, kind: kind}
				err = all.add(prefix+"/"+r.Plural, []param{prettyParam}, operation{method: "get",
					id: all.id("list", "", "ForAllNamespaces"), description: "list or watch objects of kind " + kind,
					action: "list", params: listParams(), consumes: consumesAnything, produces: producesWatch,
					responses: okResponses(defs.list, 200)})
			}
		case "watch":
			err = rt.addWatch(s, r, prefix)
		case "create":
			err = s.add(collection, collParams, operation{method: "post", id: s.id("create", "", ""),
				description: "create a " + kind, action: "post", params: createParams(),
				body: defs.object, bodyRequired: true, consumes: consumesAnything, produces: producesObject,
				responses: okResponses(defs.object, 200, 201, 202)})
		case "deletecollection":
			err = s.add(collection, collParams, operation{method: "delete", id: s.id("delete", "Collection", ""),
				description: "delete collection of " + kind, action: "deletecollection",
				params: deleteCollectionParams(), body: rt.meta.deleteOptions, consumes: consumesAnything,
				produces: producesObject, responses: okResponses(rt.meta.status, 200)})
		case "get":
			err = s.add(item, itemParams, operation{method: "get", id: s.id("read", "", ""),
				description: "read the specified " + kind, action: "get", consumes: consumesAnything,
				produces: producesObject, responses: okResponses(defs.object, 200)})
		case "update":
			err = s.add(item, itemParams, operation{method: "put", id: s.id("replace", "", ""),
				description: "replace the specified " + kind, action: "put", params: updateParams(),
				body: defs.object, bodyRequired: true, consumes: consumesAnything, produces: producesObject,
				responses: okResponses(defs.object, 200, 201)})
		case "patch":
			err = s.add(item, itemParams, operation{method: "patch", id: s.id("patch", "", ""),
				description: "partially update the specified " + kind, action: "patch", params: patchParams(),
				body: rt.meta.patch, bodyRequired: true, consumes: consumesPatch, produces: producesObject,
				responses: okResponses(defs.object, 200, 201)})
		case "delete":
			err = s.add(item, itemParams, operation{method: "delete", id: s.id("delete", "", ""),
				description: "delete a " + kind, action: "delete", params: deleteParams(),
				body: rt.meta.deleteOptions, consumes: consumesAnything, produces: producesObject,
				responses: okResponses(defs.object, 200, 202)})
		}
		if err != nil {
			return err
		}
	}
	for i := range r.Subresources {
		if err := rt.addSubresource(s, &r.Subresources[i], item, collParams, defs.subs[i]); err != nil {
			return err
		}
	}
	return nil
}

// addWatch adds the deprecated /watch/ paths of a resource.
func (rt *routeTable) addWatch(s *scope, r *Resource, prefix string) error {
	kind := r.GVK.Kind
	watchlist := func(id string) operation {
		return operation{method: "get", id: id, action: "watchlist",
			description: "watch individual changes to a list of " + kind +
				". deprecated: use the 'watch' parameter with a list operation instead.",
			params: listParams(), consumes: consumesAnything, produces: producesWatch,
			responses: okResponses(rt.meta.watchEvent, 200)}
	}
	nsPrefix := prefix + "/watch"
	if r.Namespaced {
		nsPrefix += "/namespaces/{namespace}"
	}
	collection := nsPrefix + "/" + r.Plural
	collParams := append(append([]param{}, s.ns...), prettyParam)
	if err := s.add(collection, collParams, watchlist(s.id("watch", "", "List"))); err != nil {
		return err
	}
	if err := s.add(collection+"/{name}", append([]param{nameParam(kind)}, collParams...), operation{
		method: "get", id: s.id("watch", "", ""), action: "watch",
		description: "watch changes to an object of kind " + kind +
			". deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter.",
		params: listParams(), consumes: consumesAnything, produces: producesWatch,
		responses: okResponses(rt.meta.watchEvent, 200)}); err != nil {
		return err
	}
	if !r.Namespaced {
		return nil
	}
	all := &scope{rt: rt, gv: s.gv, gvk: s.gvk, idPrefix: s.idPrefix, kind: kind}
	return all.add(prefix+"/watch/"+r.Plural, []param{prettyParam}, watchlist(all.id("watch", "", "ListForAllNamespaces")))
}

// addSubresource adds the operations of one subresource under item.
func (rt *routeTable) addSubresource(s *scope, sub *Subresource, item string, collParams []param, def string) error {
	path := item + "/" + sub.Name
	pathParams := append([]param{nameParam(sub.GVK.Kind)}, collParams...)
	suffix := camelIdentifier(sub.Name, true)
	gvk := sub.GVK
	kind := s.kind
	for _, verb := range sub.Verbs {
		var op operation
		switch verb {
		case "get":
			op = operation{method: "get", id: s.id("read", "", suffix), action: "get",
				description: "read " + sub.Name + " of the specified " + kind,
				consumes:    consumesAnything, produces: producesObject, responses: okResponses(def, 200)}
		case "update":
			op = operation{method: "put", id: s.id("replace", "", suffix), action: "put",
				description: "replace " + sub.Name + " of the specified " + kind, params: updateParams(),
				body: def, bodyRequired: true, consumes: consumesAnything, produces: producesObject,
				responses: okResponses(def, 200, 201)}
		case "patch":
			op = operation{method: "patch", id: s.id("patch", "", suffix), action: "patch",
				description: "partially update " + sub.Name + " of the specified " + kind, params: patchParams(),
				body: rt.meta.patch, bodyRequired: true, consumes: consumesPatch, produces: producesObject,
				responses: okResponses(def, 200, 201)}
		case "create":
			op = operation{method: "post", id: s.id("create", "", suffix), action: "post",
				description: "create " + sub.Name + " of a " + kind, params: createParams(),
				body: def, bodyRequired: true, consumes: consumesAnything, produces: producesObject,
				responses: okResponses(def, 200, 201, 202)}
		case "delete":
			op = operation{method: "delete", id: s.id("delete", "", suffix), action: "delete",
				description: "delete " + sub.Name + " of a " + kind, params: deleteParams(),
				body: rt.meta.deleteOptions, consumes: consumesAnything, produces: producesObject,
				responses: okResponses(def, 200, 202)}
		default:
			return fmt.Errorf("openapi: %s/%s: unsupported subresource verb %q", s.kind, sub.Name, verb)
		}
		op.gvk = &gvk
		if err := s.add(path, pathParams, op); err != nil {
			return err
		}
	}
	return nil
}
