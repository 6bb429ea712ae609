package openapi

import (
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// param is one request parameter of an operation (path or query).
type param struct {
	name        string
	in          string // "path" or "query"
	typ         string // "string", "integer" or "boolean"
	description string
	required    bool
}

// Media types of requests and responses.
var (
	mediaJSON        = "application/json"
	producesObject   = []string{mediaJSON, "application/yaml", "application/vnd.kubernetes.protobuf"}
	producesWatch    = append(append([]string{}, producesObject...), "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch")
	consumesAnything = []string{"*/*"}
	consumesPatch    = []string{
		"application/json-patch+json",
		"application/merge-patch+json",
		"application/strategic-merge-patch+json",
		"application/apply-patch+yaml",
	}
)

// The descriptions of query parameters come from the documentation of the
// options types they are decoded into, as upstream's do.
var (
	listDocs   = metav1.ListOptions{}.SwaggerDoc()
	createDocs = metav1.CreateOptions{}.SwaggerDoc()
	updateDocs = metav1.UpdateOptions{}.SwaggerDoc()
	patchDocs  = metav1.PatchOptions{}.SwaggerDoc()
	deleteDocs = metav1.DeleteOptions{}.SwaggerDoc()
)

func query(name, typ string, docs map[string]string) param {
	return param{name: name, in: "query", typ: typ, description: docs[name]}
}

var (
	prettyParam    = param{name: "pretty", in: "query", typ: "string", description: "If 'true', then the output is pretty printed."}
	namespaceParam = param{name: "namespace", in: "path", typ: "string", required: true,
		description: "object name and auth scope, such as for teams and projects"}
)

// nameParam is the {name} path parameter of an object of the given kind.
func nameParam(kind string) param {
	return param{name: "name", in: "path", typ: "string", required: true, description: "name of the " + kind}
}

// listParams are the query parameters of list and watch operations.
func listParams() []param {
	return []param{
		query("allowWatchBookmarks", "boolean", listDocs),
		query("continue", "string", listDocs),
		query("fieldSelector", "string", listDocs),
		query("labelSelector", "string", listDocs),
		query("limit", "integer", listDocs),
		query("resourceVersion", "string", listDocs),
		query("resourceVersionMatch", "string", listDocs),
		query("sendInitialEvents", "boolean", listDocs),
		query("timeoutSeconds", "integer", listDocs),
		query("watch", "boolean", listDocs),
	}
}

// writeParams are the query parameters of create (POST) and replace (PUT).
func writeParams(docs map[string]string) []param {
	return []param{
		query("dryRun", "string", docs),
		query("fieldManager", "string", docs),
		query("fieldValidation", "string", docs),
	}
}

func createParams() []param { return writeParams(createDocs) }
func updateParams() []param { return writeParams(updateDocs) }

// patchParams are the query parameters of PATCH, including server-side apply's force.
func patchParams() []param {
	return append(writeParams(patchDocs), query("force", "boolean", patchDocs))
}

// deleteParams are the query parameters of DELETE on one object.
func deleteParams() []param {
	return []param{
		query("dryRun", "string", deleteDocs),
		query("gracePeriodSeconds", "integer", deleteDocs),
		query("ignoreStoreReadErrorWithClusterBreakingPotential", "boolean", deleteDocs),
		query("orphanDependents", "boolean", deleteDocs),
		query("propagationPolicy", "string", deleteDocs),
	}
}

// deleteCollectionParams are the query parameters of DELETE on a collection:
// the delete options plus the list options that select what is deleted.
func deleteCollectionParams() []param {
	ps := deleteParams()
	for _, p := range listParams() {
		if p.name != "watch" && p.name != "allowWatchBookmarks" {
			ps = append(ps, p)
		}
	}
	return ps
}

// sortParams orders parameters by name, then location, as upstream does.
func sortParams(ps []param) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].name != ps[j].name {
			return ps[i].name < ps[j].name
		}
		return ps[i].in < ps[j].in
	})
}
