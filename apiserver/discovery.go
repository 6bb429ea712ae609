package apiserver

import (
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

func (s *Server) version(c echo.Context) error {
	v := strings.TrimPrefix(s.cfg.Version, "v")
	major, minor, _ := strings.Cut(v, ".")
	minor, _, _ = strings.Cut(minor, ".")
	return c.JSON(http.StatusOK, version.Info{
		Major: major, Minor: minor, GitVersion: s.cfg.Version, GoVersion: runtime.Version(),
		Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}

func (s *Server) apiVersions(c echo.Context) error {
	if v := aggregatedDiscoveryVersion(c.Request().Header.Get(echo.HeaderAccept)); v != "" {
		return s.serveAggregatedDiscovery(c, v, true) // discovery_aggregated.go
	}
	return responses.Object(c, http.StatusOK, &metav1.APIVersions{
		Versions:                   []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: c.Request().Host}},
	}, scheme.MetaGV)
}

func (s *Server) apiGroups(c echo.Context) error {
	if v := aggregatedDiscoveryVersion(c.Request().Header.Get(echo.HeaderAccept)); v != "" {
		return s.serveAggregatedDiscovery(c, v, false)
	}
	list := &metav1.APIGroupList{}
	for _, g := range s.allGroups() {
		list.Groups = append(list.Groups, g)
	}
	return responses.Object(c, http.StatusOK, list, scheme.MetaGV)
}

// groups returns the named API groups (not the core group), each with its
// versions.
func (s *Server) groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	index := map[string]int{}
	for _, gv := range s.Registry.GroupVersions() {
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
func (s *Server) resourceList(gv schema.GroupVersion) (*metav1.APIResourceList, bool) {
	list := &metav1.APIResourceList{GroupVersion: gv.String()}
	for _, r := range s.Registry.Resources() {
		if r.GroupVersion() != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.Plural, SingularName: r.Singular, Namespaced: r.Namespaced, Kind: r.GVK.Kind,
			Verbs: handlers.ResourceVerbs(r), ShortNames: r.ShortNames, Categories: r.Categories,
		})
		s.Subresources.AddDiscovery(list, r)
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
	}
	return list, len(list.APIResources) > 0
}
