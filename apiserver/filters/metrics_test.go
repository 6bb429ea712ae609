package filters

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics/legacyregistry"
)

// requestSeries are the apiserver_request_total series of group g, by
// their label values.
func requestSeries(t *testing.T, g string) []map[string]string {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, mf := range mfs {
		if mf.GetName() != "apiserver_request_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := labelMap(m)
			if labels["group"] == g || (g == "" && labels["group"] == "" && labels["resource"] == "") {
				out = append(out, labels)
			}
		}
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

func TestRequestMetrics_VerbsCodesAndPaths(t *testing.T) {
	const group = "metrics-filter.example.com"
	e := echo.New()
	rm := &RequestMetrics{Describe: func(info *request.RequestInfo) (bool, bool, string) {
		if info.Resource == "oldwidgets" {
			return true, true, "1.40"
		}
		return info.Resource == "widgets", false, ""
	}}
	e.Use(RequestInfo, rm.Middleware)
	e.Any("/*", func(c echo.Context) error {
		if c.Request().Method == http.MethodDelete {
			return echo.NewHTTPError(http.StatusTooManyRequests) // written by echo after the chain
		}
		return c.String(http.StatusOK, "ok")
	})
	for _, r := range []struct{ method, path string }{
		{"POST", "/apis/" + group + "/v1/namespaces/ns/widgets/w/exec?command=true"},
		{"GET", "/apis/" + group + "/v1/widgets"},
		{"GET", "/apis/" + group + "/v1/namespaces/ns/widgets?watch=1"},
		{"GET", "/apis/" + group + "/v1/namespaces/ns/widgets/w"},
		{"DELETE", "/apis/" + group + "/v1/namespaces/ns/widgets/w"},
		{"GET", "/apis/" + group + "/v1/oldwidgets"},
		{"GET", "/not/an/api/path"},
		{"GET", "/apis/" + group + "/v1/gadgets"},
	} {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(r.method, r.path, nil))
	}
	want := map[string]map[string]string{
		"CONNECT": {"resource": "widgets", "subresource": "exec", "scope": "resource", "code": "200"},
		"LIST":    {"resource": "widgets", "scope": "cluster", "code": "200"},
		"WATCH":   {"resource": "widgets", "scope": "namespace", "code": "200"},
		"GET":     {"resource": "widgets", "scope": "resource", "code": "200"},
		"DELETE":  {"resource": "widgets", "scope": "resource", "code": "429"},
	}
	got := map[string]map[string]string{}
	for _, s := range requestSeries(t, group) {
		if s["resource"] == "widgets" {
			got[s["verb"]] = s
		}
		if s["component"] != "apiserver" || s["version"] != "v1" {
			t.Errorf("series %v: want component apiserver, version v1", s)
		}
	}
	for verb, labels := range want {
		s, ok := got[verb]
		if !ok {
			t.Errorf("no %s series; got %v", verb, got)
			continue
		}
		for k, v := range labels {
			if s[k] != v {
				t.Errorf("%s: %s = %q, want %q", verb, k, s[k], v)
			}
		}
	}
	for _, s := range requestSeries(t, "") {
		if s["subresource"] == "/not/an/api/path" {
			t.Errorf("a path that is not served is counted: %v", s)
		}
	}
	if _, ok := got["LIST"]; ok && len(requestSeries(t, group)) != len(want)+1 {
		t.Errorf("series: %v; want widgets' and oldwidgets' only", requestSeries(t, group))
	}
	mfs, _ := legacyregistry.DefaultGatherer.Gather()
	deprecated := false
	for _, mf := range mfs {
		if mf.GetName() == "apiserver_requested_deprecated_apis" {
			for _, m := range mf.GetMetric() {
				l := labelMap(m)
				deprecated = deprecated || (l["resource"] == "oldwidgets" && l["removed_release"] == "1.40")
			}
		}
	}
	if !deprecated {
		t.Error("apiserver_requested_deprecated_apis has no oldwidgets removed in 1.40")
	}
}

func TestRequestMetrics_Off(t *testing.T) {
	const group = "metrics-off.example.com"
	e := echo.New()
	e.Use(RequestInfo, (&RequestMetrics{Off: true}).Middleware)
	e.Any("/*", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/apis/"+group+"/v1/widgets", nil))
	if s := requestSeries(t, group); len(s) != 0 {
		t.Errorf("recorded while off: %v", s)
	}
}

// inflightGauge is apiserver_current_inflight_requests{request_kind=kind}.
func inflightGauge(t *testing.T, kind string) float64 {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "apiserver_current_inflight_requests" {
			for _, m := range mf.GetMetric() {
				if labelMap(m)["request_kind"] == kind {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no apiserver_current_inflight_requests{request_kind=%q}", kind)
	return 0
}

func TestInflightLimiter_PublishesPeaks(t *testing.T) {
	l := NewInflightLimiter(4, 2)
	// What PublishMetrics does at once and then every second (here
	// without its ticker, which could strike between the steps).
	metrics.Register()
	l.publishPeaks()
	if got := inflightGauge(t, "readOnly"); got != 0 {
		t.Fatalf("readOnly at start: %v, want 0", got)
	}
	a, b := heldKey{user: "a"}, heldKey{user: "b"}
	m := heldKey{user: "a", mutating: true}
	for _, k := range []heldKey{a, b} {
		if !l.take(l.readOnly, k) {
			t.Fatal("no read-only slot")
		}
	}
	if !l.take(l.mutating, m) {
		t.Fatal("no mutating slot")
	}
	l.release(l.readOnly, b)
	l.release(l.mutating, m)
	l.publishPeaks()
	if got, want := inflightGauge(t, "readOnly"), 2.0; got != want {
		t.Errorf("readOnly: %v, want the peak %v", got, want)
	}
	if got, want := inflightGauge(t, "mutating"), 1.0; got != want {
		t.Errorf("mutating: %v, want the peak %v", got, want)
	}
	l.publishPeaks() // the next period starts from what is held
	if got, want := inflightGauge(t, "readOnly"), 1.0; got != want {
		t.Errorf("readOnly next period: %v, want %v", got, want)
	}
	if got, want := inflightGauge(t, "mutating"), 0.0; got != want {
		t.Errorf("mutating next period: %v, want %v", got, want)
	}
}

// BenchmarkRequestMetrics: the request metrics' own cost per request (a
// pod create through RequestInfo and RequestMetrics to a handler that
// writes 201), with and without them.
func BenchmarkRequestMetrics(b *testing.B) {
	for _, off := range []bool{false, true} {
		name := "on"
		if off {
			name = "off"
		}
		b.Run(name, func(b *testing.B) {
			e := echo.New()
			rm := &RequestMetrics{Off: off, Describe: func(*request.RequestInfo) (bool, bool, string) { return true, false, "" }}
			e.Use(RequestInfo, rm.Middleware)
			e.Any("/*", func(c echo.Context) error { return c.String(http.StatusCreated, "{}") })
			b.ReportAllocs()
			for b.Loop() {
				e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/api/v1/namespaces/default/pods", nil))
			}
		})
	}
}
