package discovery

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// aggregatedDiscoveryGroup is the API group of aggregated discovery.
const aggregatedDiscoveryGroup = "apidiscovery.k8s.io"

// aggregatedDiscoveryVersion returns the version of aggregated discovery
// ("v2" or "v2beta1", served in JSON) the Accept header asks for, or ""
// when the legacy document is wanted: the first entry the server can
// answer wins (clients list their preference first; q values are not
// weighed), and an entry for a plain encoding before any aggregated one
// means legacy. Aggregated discovery in protobuf is not served.
func aggregatedDiscoveryVersion(accept string) string {
	for _, entry := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(entry))
		if err != nil {
			continue
		}
		if params["g"] == "" && params["as"] == "" {
			switch mediaType {
			case "application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/*", "*/*":
				return ""
			}
			continue
		}
		if mediaType == "application/json" && params["g"] == aggregatedDiscoveryGroup && params["as"] == "APIGroupDiscoveryList" &&
			(params["v"] == "v2" || params["v"] == "v2beta1") {
			return params["v"]
		}
	}
	return ""
}

// serveAggregatedDiscovery answers /api (core) or /apis with every group,
// version and resource in one APIGroupDiscoveryList, built from the
// registry at request time. The v2beta1 document is the v2 one under its
// own apiVersion: the two versions' types have the same fields. An ETag
// of the body is sent; a request whose If-None-Match carries it gets 304.
func (d *Discovery) serveAggregatedDiscovery(c echo.Context, version string, core bool) error {
	list := d.aggregatedDiscovery(core)
	if !core {
		d.mergeRemote(c.Request().Context(), list)
	}
	list.APIVersion = aggregatedDiscoveryGroup + "/" + version
	body, err := json.Marshal(list)
	if err != nil {
		return responses.Status(c, err)
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	h := c.Response().Header()
	h.Set("ETag", etag)
	h.Set("Vary", "Accept")
	h.Set(echo.HeaderContentType, "application/json;g="+aggregatedDiscoveryGroup+";v="+version+";as=APIGroupDiscoveryList")
	if match := c.Request().Header.Get("If-None-Match"); match != "" && strings.Contains(match, etag) {
		return c.NoContent(http.StatusNotModified)
	}
	c.Response().WriteHeader(http.StatusOK)
	_, err = c.Response().Write(body)
	return err
}

// aggregatedDiscovery is the core group (core) or the named groups, each
// with its versions, preferred first.
func (d *Discovery) aggregatedDiscovery(core bool) *apidiscoveryv2.APIGroupDiscoveryList {
	list := &apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList"}}
	if core {
		group := apidiscoveryv2.APIGroupDiscovery{}
		for _, gv := range d.Registry.GroupVersions() {
			if gv.Group == "" {
				group.Versions = append(group.Versions, d.versionDiscovery(gv))
			}
		}
		list.Items = append(list.Items, group)
		return list
	}
	for _, g := range d.groups() {
		group := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		group.Versions = append(group.Versions, d.versionDiscovery(schema.GroupVersion{Group: g.Name, Version: g.PreferredVersion.Version}))
		for _, v := range g.Versions {
			if v.Version != g.PreferredVersion.Version {
				group.Versions = append(group.Versions, d.versionDiscovery(schema.GroupVersion{Group: g.Name, Version: v.Version}))
			}
		}
		list.Items = append(list.Items, group)
	}
	return list
}

// versionDiscovery turns a group-version's legacy resource list into its
// aggregated form: subresources ("pods/status") go under their resource.
func (d *Discovery) versionDiscovery(gv schema.GroupVersion) apidiscoveryv2.APIVersionDiscovery {
	list, _ := d.resourceList(gv)
	return VersionDiscoveryOf(gv, list)
}

// VersionDiscoveryOf is versionDiscovery of a given resource list.
func VersionDiscoveryOf(gv schema.GroupVersion, list *metav1.APIResourceList) apidiscoveryv2.APIVersionDiscovery {
	out := apidiscoveryv2.APIVersionDiscovery{Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	index := map[string]int{}
	for _, r := range list.APIResources {
		// As kube-apiserver: group and version are empty when they are
		// the group-version's own (as in the legacy document).
		kind := &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
		if parent, sub, ok := strings.Cut(r.Name, "/"); ok {
			if i, found := index[parent]; found {
				out.Resources[i].Subresources = append(out.Resources[i].Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: sub, ResponseKind: kind, Verbs: r.Verbs,
				})
			}
			continue
		}
		scope := apidiscoveryv2.ScopeCluster
		if r.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		index[r.Name] = len(out.Resources)
		out.Resources = append(out.Resources, apidiscoveryv2.APIResourceDiscovery{
			Resource: r.Name, ResponseKind: kind, Scope: scope, SingularResource: r.SingularName,
			Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories,
		})
	}
	return out
}
