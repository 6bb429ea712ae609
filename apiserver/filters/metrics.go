package filters

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// RequestMetrics records every API request in Kubernetes' own request
// metrics (k8s.io/apiserver/pkg/endpoints/metrics, which kube-apiserver's
// REST installer calls for each route): apiserver_request_total,
// apiserver_request_duration_seconds, apiserver_request_sli_duration_seconds,
// apiserver_response_sizes (GET and LIST), apiserver_longrunning_requests
// (watches and the connect subresources, while they last) and
// apiserver_requested_deprecated_apis. Verbs are reported as
// kube-apiserver reports them (LIST apart from GET, WATCH, APPLY for a
// server-side apply patch, CONNECT for exec, attach, port-forward and the
// proxies); component is "apiserver".
//
// Unlike kube-apiserver, requests answered before they reach a handler
// (401, 403, 429) are counted too, with their code: it sits right after
// RequestInfo. Non-resource requests are counted only on the paths of
// NonResourcePaths (their path is the subresource label, as upstream), so
// that arbitrary URLs cannot grow the series without bound.
type RequestMetrics struct {
	// Describe reports whether a resource request names a served
	// resource (and subresource) — others are not counted, so that
	// arbitrary paths, which anyone may ask for before authentication,
	// cannot grow the series without bound, and kube-apiserver does not
	// count requests no route serves either — and whether its API version
	// is deprecated, with the release it is removed in ("" if none).
	// nil: every resource request is counted, none deprecated.
	Describe func(info *request.RequestInfo) (served, deprecated bool, removedRelease string)
	// Off turns recording off (benchmarks compare with and without).
	Off bool
}

// NonResourcePaths are the non-resource paths counted by RequestMetrics.
var NonResourcePaths = map[string]bool{
	"/healthz": true, "/livez": true, "/readyz": true, "/version": true, "/metrics": true,
	"/api": true, "/apis": true, "/openapi/v2": true, "/openapi/v3": true,
}

// Middleware goes right after RequestInfo.
func (m *RequestMetrics) Middleware(next echo.HandlerFunc) echo.HandlerFunc {
	if m.Off {
		return next
	}
	metrics.Register()
	return func(c echo.Context) error {
		start := time.Now()
		req := c.Request()
		info, ok := request.RequestInfoFrom(req.Context())
		if !ok || (!info.IsResourceRequest && !NonResourcePaths[req.URL.Path]) {
			return next(c)
		}
		var deprecated bool
		var removed string
		if info.IsResourceRequest && m.Describe != nil {
			var served bool
			if served, deprecated, removed = m.Describe(info); !served {
				return next(c)
			}
		}
		// The webhooks add their time here, which the SLI leaves out.
		req = req.WithContext(request.WithLatencyTrackers(req.Context()))
		c.SetRequest(req)
		var err error
		if longRunning(info) {
			metrics.RecordLongRunning(req, info, metrics.APIServerComponent, func() { err = serve(c, next) })
		} else {
			err = serve(c, next)
		}
		observe(c.Request(), info, c.Response(), deprecated, removed, time.Since(start))
		return err
	}
}

// serve runs next and, if it returned an error that nothing wrote yet,
// writes it now (as echo would after the chain), so that its code is
// known here.
func serve(c echo.Context, next echo.HandlerFunc) error {
	err := next(c)
	if err != nil && !c.Response().Committed {
		c.Error(err)
		return nil
	}
	return err
}

// longRunning requests are watches and the connect subresources.
func longRunning(info *request.RequestInfo) bool {
	return info.Verb == "watch" || (info.IsResourceRequest && LongRunningSubresources.Has(info.Subresource))
}

func observe(req *http.Request, info *request.RequestInfo, resp *echo.Response, deprecated bool, removed string, elapsed time.Duration) {
	code := resp.Status
	if code == 0 {
		code = http.StatusOK
	}
	if !info.IsResourceRequest {
		metrics.MonitorRequest(req, strings.ToUpper(req.Method), "", "", "", req.URL.Path, "", metrics.APIServerComponent, false, "", code, int(resp.Size), elapsed)
		return
	}
	scope := metrics.CleanScope(info)
	// MonitorRequest reports GET as LIST by scope, and WATCH, APPLY and
	// CONNECT by the request; the verb passed is the route's, which
	// decides whether a response size is observed (GET and LIST only).
	verb := metrics.CanonicalVerb(strings.ToUpper(req.Method), scope)
	if info.Verb == "watch" {
		verb = metrics.MethodWatch
	}
	metrics.MonitorRequest(req, verb, info.APIGroup, info.APIVersion, info.Resource, info.Subresource, scope,
		metrics.APIServerComponent, deprecated, removed, code, int(resp.Size), elapsed)
}
