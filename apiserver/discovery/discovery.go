package discovery

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// Discovery serves the discovery documents: /version, /api, /apis (also
// aggregated, aggregated.go) and each group-version's resource
// list, for the resources the registry holds and the groups aggregated
// API servers add.
type Discovery struct {
	Registry     *registry.Registry
	Subresources handlers.Subresources
	// Version is reported at /version.
	Version string
	// Remote returns what aggregated API servers add (nil: nothing yet).
	Remote func() Remote
}

// Remote is what aggregated API servers add to discovery.
type Remote interface {
	// MergeGroups adds the remote groups and versions to local.
	MergeGroups(local []metav1.APIGroup) []metav1.APIGroup
	// MergeAggregated adds the remote group-versions to an aggregated
	// discovery document.
	MergeAggregated(ctx context.Context, list *apidiscoveryv2.APIGroupDiscoveryList)
	// HasGroups reports whether aggregated servers add any group-version.
	HasGroups() bool
}

// Generation is a number that changes whenever what discovery serves may
// have, and whether it can tell: not while aggregated servers add
// group-versions, whose resource lists change without notice here. A
// client that caches discovery (the in-process controllers) reads it
// before it fetches and fetches again when it changes.
func (d *Discovery) Generation() (uint64, bool) {
	if d.Remote != nil {
		if r := d.Remote(); r != nil && r.HasGroups() {
			return 0, false
		}
	}
	return d.Registry.Generation(), true
}

// AllGroups are the named groups served here and by aggregated servers.
func (d *Discovery) AllGroups() []metav1.APIGroup {
	local := d.groups()
	if d.Remote != nil {
		if r := d.Remote(); r != nil {
			return r.MergeGroups(local)
		}
	}
	return local
}

// mergeRemote adds the aggregated servers' group-versions to list.
func (d *Discovery) mergeRemote(ctx context.Context, list *apidiscoveryv2.APIGroupDiscoveryList) {
	if d.Remote != nil {
		if r := d.Remote(); r != nil {
			r.MergeAggregated(ctx, list)
		}
	}
}

// ServeVersion serves /version.
func (d *Discovery) ServeVersion(c echo.Context) error {
	v := strings.TrimPrefix(d.Version, "v")
	major, minor, _ := strings.Cut(v, ".")
	minor, _, _ = strings.Cut(minor, ".")
	return c.JSON(http.StatusOK, version.Info{
		Major: major, Minor: minor, GitVersion: d.Version, GoVersion: runtime.Version(),
		Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}

// ServeVersions serves /api: the core group's versions, or with an
// Accept for apidiscovery.k8s.io the aggregated core discovery.
func (d *Discovery) ServeVersions(c echo.Context) error {
	if v := aggregatedDiscoveryVersion(c.Request().Header.Get(echo.HeaderAccept)); v != "" {
		return d.serveAggregatedDiscovery(c, v, true) // aggregated.go
	}
	return responses.Object(c, http.StatusOK, &metav1.APIVersions{
		Versions:                   []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: c.Request().Host}},
	}, scheme.MetaGV)
}

// ServeGroups serves /apis: the named groups, or with an Accept for
// apidiscovery.k8s.io the aggregated discovery of every group.
func (d *Discovery) ServeGroups(c echo.Context) error {
	if v := aggregatedDiscoveryVersion(c.Request().Header.Get(echo.HeaderAccept)); v != "" {
		return d.serveAggregatedDiscovery(c, v, false)
	}
	return d.serveGroupList(c)
}

// serveGroupList serves the named groups' APIGroupList, what /apis/ (with
// its trailing slash) serves whatever the Accept header: kube-apiserver's
// aggregator serves aggregated discovery at /apis only.
func (d *Discovery) serveGroupList(c echo.Context) error {
	list := &metav1.APIGroupList{}
	for _, g := range d.AllGroups() {
		list.Groups = append(list.Groups, g)
	}
	return responses.Object(c, http.StatusOK, list, scheme.MetaGV)
}

// groups returns the named API groups (not the core group), each with its
// versions.
func (d *Discovery) groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	index := map[string]int{}
	for _, gv := range d.Registry.GroupVersions() {
		if gv.Group == "" {
			continue
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		i, ok := index[gv.Group]
		if !ok {
			index[gv.Group] = len(out)
			out = append(out, metav1.APIGroup{Name: gv.Group, PreferredVersion: v})
			i = len(out) - 1
		}
		out[i].Versions = append(out[i].Versions, v)
	}
	// Versions newest first (v2, v1, v1beta1...), the first preferred, as
	// kube-apiserver orders them.
	for i := range out {
		slices.SortStableFunc(out[i].Versions, func(a, b metav1.GroupVersionForDiscovery) int {
			return -version.CompareKubeAwareVersionStrings(a.Version, b.Version)
		})
		out[i].PreferredVersion = out[i].Versions[0]
	}
	return out
}

// resourceList is the discovery document of one group-version.
func (d *Discovery) resourceList(gv schema.GroupVersion) (*metav1.APIResourceList, bool) {
	list := &metav1.APIResourceList{GroupVersion: gv.String()}
	for _, r := range d.Registry.Resources() {
		if r.GroupVersion() != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.Plural, SingularName: r.Singular, Namespaced: r.Namespaced, Kind: r.GVK.Kind,
			Verbs: handlers.ResourceVerbs(r), ShortNames: r.ShortNames, Categories: r.Categories,
		})
		d.Subresources.AddDiscovery(list, r)
		if r.Scale {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Plural + "/scale", Namespaced: r.Namespaced, Group: "autoscaling", Version: "v1", Kind: "Scale",
				Verbs: metav1.Verbs{"get", "patch", "update"},
			})
		}
		if r.Status {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Plural + "/status", Namespaced: r.Namespaced, Kind: r.GVK.Kind,
				Verbs: metav1.Verbs{"get", "patch", "update"},
			})
		}
		if r.Approval {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Plural + "/approval", Namespaced: r.Namespaced, Kind: r.GVK.Kind,
				Verbs: metav1.Verbs{"get", "patch", "update"},
			})
		}
		for _, sub := range r.ObjectSubresources {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Plural + "/" + sub, Namespaced: r.Namespaced, Kind: r.GVK.Kind,
				Verbs: metav1.Verbs{"get", "patch", "update"},
			})
		}
	}
	return list, len(list.APIResources) > 0
}

// ServeGroupVersion serves /api/VERSION, /apis/GROUP and
// /apis/GROUP/VERSION, each with or without a trailing slash, and /api/
// and /apis/, as kube-apiserver does: /api/ is /api (both are its legacy
// root route), /apis/ the APIGroupList only (serveGroupList).
func (d *Discovery) ServeGroupVersion(c echo.Context) error {
	parts := strings.Split(strings.Trim(c.Request().URL.Path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "api":
		return d.ServeVersions(c)
	case len(parts) == 1 && parts[0] == "apis":
		return d.serveGroupList(c)
	case len(parts) == 2 && parts[0] == "api":
		if list, ok := d.resourceList(schema.GroupVersion{Version: parts[1]}); ok {
			return responses.Object(c, http.StatusOK, list, scheme.MetaGV)
		}
	case len(parts) == 2 && parts[0] == "apis":
		for _, g := range d.AllGroups() {
			if g.Name == parts[1] {
				return responses.Object(c, http.StatusOK, &g, scheme.MetaGV)
			}
		}
	case len(parts) == 3 && parts[0] == "apis":
		if list, ok := d.resourceList(schema.GroupVersion{Group: parts[1], Version: parts[2]}); ok {
			return responses.Object(c, http.StatusOK, list, scheme.MetaGV)
		}
	}
	return responses.Status(c, apierrors.NewNotFound(schema.GroupResource{}, c.Request().URL.Path))
}
