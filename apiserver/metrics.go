package apiserver

import (
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/metrics/legacyregistry"

	// client-go's request metrics (rest_client_*), registered in
	// legacyregistry and hooked into client-go by its init, as in upstream's
	// components.
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	// kubernetes_build_info, registered by the package's init.
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/sqlkube/sqlkube/apiserver/admission"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/subresources"
)

// Which metrics are the API server's.
//
// Kubernetes' libraries register their metrics in one process-wide
// registry, k8s.io/component-base/metrics/legacyregistry, mostly from
// package init()s or Register() functions whose sync.Once makes them
// process-wide too: the API server's (apiserver_*, etcd_*, the watch
// cache's, admission's, authentication's, aggregator_*), the controller
// manager's (workqueue_* — every informer-driven controller of the process,
// the API server's own included —, node_collector_*, job_controller_*,
// endpoint_slice_*...), the scheduler's (scheduler_*) and the process's
// (go_*, process_*, kubernetes_build_info, kubernetes_feature_enabled,
// registered_metrics_total...). client-go's rest_client_* would be one
// more, labelled by host and verb only, so that the API server's
// loopback, the controllers' and the scheduler's requests would land in
// the same series; it is not registered (component-base's
// metrics/prometheus/restclient is not linked in). The metric
// values are package variables: a family cannot be registered in a second
// registry for one component only, nor split by component afterwards.
//
// So a component's endpoint is a view of legacyregistry filtered by family
// name: the API server's /metrics serves the families whose names
// APIServerOwns, and the controller manager's and the scheduler's endpoints
// can serve theirs with their own prefixes (a family on no list is served
// nowhere, which a test can catch). A family shared by name (workqueue_*)
// goes to one endpoint, the controller manager's: a series appears on one
// endpoint only. go_* and process_* describe the whole process, which the API
// server's endpoint serves; a component of its own process (sqlkube
// controller-manager) serves them itself.
var apiServerPrefixes = []string{
	"apiserver_",      // requests, admission, storage, watch cache, flow control, authentication...
	"etcd_",           // the etcd3 store's requests and bookmarks
	"aggregator_",     // the aggregator's unavailable APIServices
	"authentication_", // authentication latency and attempts
	"authorization_",  // authorization latency and attempts
	"authenticated_user_requests",
	"field_validation_request_duration_seconds",
	"watch_cache_", // the watch cache's capacity changes
	"serviceaccount_",
	"pod_security_",    // the PodSecurity admission plugin
	"sqlkube_storage_", // our watch fan-out and list latency by source
	"kubernetes_build_info",
	"kubernetes_feature_enabled",
	"registered_metrics_total", "disabled_metrics_total", "hidden_metrics_total",
	"cardinality_enforcement_unexpected_categorizations_total",
	"go_", "process_",
	"sqlkube_component_panics_total", // panics recovered in any of the process's components
	// client-go's, for every client of the process; the series of an
	// in-process component's own client (by their host label,
	// RESTClientHost) go to that component's endpoint instead.
	restClientPrefix,
}

// restClientPrefix begins client-go's request metrics' names.
const restClientPrefix = "rest_client_"

// RESTClientHost is the host of an in-process component's loopback
// client ("http://" + RESTClientHost(component) is its rest.Config's
// Host; the loopback dials the API server in memory whatever the host).
// client-go labels its rest_client_* series with it, so that each
// component's endpoint serves its own client's series, as upstream's
// components serve theirs, and the API server's the rest.
func RESTClientHost(component string) string { return component + ".loopback" }

// clientSeries keeps the series of an owned rest_client_* family whose
// host label host accepts ("" for the series without one, such as the
// process-wide transport cache's; nil: all of them).
func clientSeries(mf *dto.MetricFamily, host func(string) bool) bool {
	if host == nil || !strings.HasPrefix(mf.GetName(), restClientPrefix) {
		return true
	}
	kept := mf.Metric[:0]
	for _, m := range mf.Metric {
		h := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "host" {
				h = l.GetValue()
			}
		}
		if host(h) {
			kept = append(kept, m)
		}
	}
	mf.Metric = kept
	return len(kept) > 0
}

// APIServerOwns reports whether the metric family name is served on the
// API server's /metrics.
func APIServerOwns(family string) bool {
	for _, p := range apiServerPrefixes {
		if strings.HasPrefix(family, p) {
			return true
		}
	}
	return false
}

// ownedGatherer is a gatherer's families that own reports true for, and
// of the rest_client_* ones the series whose host label host accepts (nil:
// all).
type ownedGatherer struct {
	prometheus.Gatherer
	own  func(string) bool
	host func(string) bool
}

func (g ownedGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.Gatherer.Gather()
	kept := mfs[:0]
	for _, mf := range mfs {
		if g.own(mf.GetName()) && clientSeries(mf, g.host) {
			kept = append(kept, mf)
		}
	}
	return kept, err
}

// processMetrics are the process-wide registry's families, except those
// the admission chain records in a registry of its own (admission.Registry:
// the same names, which Kubernetes' package registers in legacyregistry
// but this process never observes there), and that registry's.
var processMetrics prometheus.Gatherer = prometheus.Gatherers{
	ownedGatherer{Gatherer: legacyregistry.DefaultGatherer,
		own: func(family string) bool { return !admission.Owns(family) }},
	admission.Registry,
}

// featureMetrics records kubernetes_feature_enabled, as kube-apiserver
// does at start (once per process: the gates are process-wide).
var featureMetrics sync.Once

// metricsHandler serves the metric families own chooses (nil: the API
// server's, APIServerOwns), of client-go's rest_client_* families the
// series whose host label host accepts (nil: all), and the families of
// more, if set, in Prometheus' text format.
func metricsHandler(own, host func(string) bool, more prometheus.Gatherer) http.Handler {
	featureMetrics.Do(utilfeature.DefaultMutableFeatureGate.AddMetrics)
	if own == nil {
		own = APIServerOwns
	}
	var g prometheus.Gatherer = ownedGatherer{processMetrics, own, host}
	if more != nil {
		g = prometheus.Gatherers{g, more}
	}
	return promhttp.HandlerFor(g,
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ProcessStartTime: legacyregistry.GetProcessStart()})
}

// requestFacts tells filters.RequestMetrics which resource requests name
// a served resource and subresource (as serveResource finds them) and
// which served versions are deprecated
// (apiserver_requested_deprecated_apis), as kube-apiserver's installer
// decides per route: by the versioned type's prerelease lifecycle against
// the server's own version. Built-in resources only (a CRD version's
// deprecated flag is not reported, nor is it by kube-apiserver's metric).
// Aggregated APIs are not counted (their resources are the remote
// server's).
type requestFacts struct {
	s            *Server
	major, minor int
	known        bool // the version parsed
	mu           sync.Mutex
	removed      map[*registry.Resource]string // removed release, or "-" if not deprecated
}

func newRequestFacts(s *Server) *requestFacts {
	f := &requestFacts{s: s, removed: map[*registry.Resource]string{}}
	if v, err := utilversion.ParseGeneric(s.cfg.Version); err == nil {
		f.major, f.minor, f.known = int(v.Major()), int(v.Minor()), true
	}
	return f
}

// Describe is filters.RequestMetrics' Describe.
func (f *requestFacts) Describe(info *request.RequestInfo) (served, deprecated bool, removedRelease string) {
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	sub := info.Subresource
	if subresources.IsLegacyBindings(gvr) && info.Name == "" && sub == "" {
		gvr.Resource, sub = "pods", "binding"
	}
	r, ok := f.s.api.Registry.Lookup(gvr)
	if !ok {
		return false, false, ""
	}
	if sub != "" {
		_, own := f.s.api.Subresources.Lookup(r, sub)
		if !own && !r.ObjectSubresource(sub) && (sub != "scale" || !r.Scale) {
			return false, false, ""
		}
	}
	if !f.known || r.Custom != nil || r.New == nil {
		return true, false, ""
	}
	f.mu.Lock()
	removed, cached := f.removed[r]
	f.mu.Unlock()
	if !cached {
		removed = "-"
		if obj := r.New(); deprecation.IsDeprecated(obj, f.major, f.minor) {
			removed = deprecation.RemovedRelease(obj)
		}
		f.mu.Lock()
		f.removed[r] = removed
		f.mu.Unlock()
	}
	if removed == "-" {
		return true, false, ""
	}
	return true, true, removed
}
