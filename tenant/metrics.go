package tenant

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the host's per-tenant figures, served on the host's own
// /metrics (a tenant's API serves none: Kubernetes' metrics are the
// process's, and would show a tenant every other tenant's). Every series
// has a tenant label:
//
//   - sqlkube_tenant_requests_total{tenant,method,code} and
//     sqlkube_tenant_request_duration_seconds{tenant} (requests other than
//     watches), counted where the tenant's API is served;
//   - the tenant's datastore families (sqlkube_sql_transaction_duration_seconds,
//     sqlkube_store_db_size_bytes, sqlkube_store_watchers, ...), from its store;
//   - sqlkube_tenant_running{tenant}: 1 while its control plane runs, 0
//     while it is suspended.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	running  *prometheus.GaugeVec
}

// NewMetrics makes the figures' registry, for HostConfig.Metrics and the
// host API's /metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sqlkube_tenant_requests_total",
			Help: "Requests to a tenant's Kubernetes API, by HTTP method and response code.",
		}, []string{"tenant", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sqlkube_tenant_request_duration_seconds",
			Help:    "Time a tenant's API took to answer a request (watches not counted).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"tenant"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sqlkube_tenant_running",
			Help: "1 while a tenant's control plane runs on this host, 0 while it is held suspended.",
		}, []string{"tenant"}),
	}
	m.Registry.MustRegister(m.requests, m.duration, m.running)
	return m
}

// storeRegisterer is where a tenant's store registers its families.
func (m *Metrics) storeRegisterer(name string) prometheus.Registerer {
	if m == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"tenant": name}, m.Registry)
}

// wrap counts the requests h serves for tenant name.
func (m *Metrics) wrap(name string) func(http.Handler) http.Handler {
	if m == nil {
		return nil
	}
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			begin := time.Now()
			rw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
			var out http.ResponseWriter = rw
			if _, ok := w.(http.Hijacker); ok {
				// Upgrades (exec, attach, port-forward) take the
				// connection over; HTTP/2 writers cannot, and must not
				// seem to.
				out = hijackWriter{rw}
			}
			h.ServeHTTP(out, r)
			m.requests.WithLabelValues(name, r.Method, strconv.Itoa(rw.code)).Inc()
			if r.URL.Query().Get("watch") != "true" && r.URL.Query().Get("watch") != "1" {
				m.duration.WithLabelValues(name).Observe(time.Since(begin).Seconds())
			}
		})
	}
}

// setRunning records whether the tenant's control plane runs.
func (m *Metrics) setRunning(name string, on bool) {
	if m == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.running.WithLabelValues(name).Set(v)
}

// forget drops a deleted tenant's series.
func (m *Metrics) forget(name string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"tenant": name}
	m.requests.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.running.DeletePartialMatch(l)
}

// codeWriter remembers the status code written. It keeps http.Flusher
// (watches flush every event) and the rest through Unwrap.
type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *codeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *codeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hijackWriter is a codeWriter over a writer that can be hijacked.
type hijackWriter struct{ *codeWriter }

func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.code = http.StatusSwitchingProtocols
	return w.ResponseWriter.(http.Hijacker).Hijack()
}
