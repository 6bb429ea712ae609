package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// metricFamilies is one scrape of /metrics.
type metricFamilies map[string]*dto.MetricFamily

// scrape reads the server's /metrics in the text format.
func (s *server) scrape(t *testing.T) metricFamilies {
	t.Helper()
	if s.metrics == "" {
		t.Fatal("scrape: the server was started without --metrics-address")
	}
	client := &http.Client{Timeout: commandTimeout}
	resp, err := client.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: parse: %v", err)
	}
	return fams
}

// find returns the series of family name whose labels include labels
// ("k=v" pairs), or an error saying what there is instead.
func (f metricFamilies) find(name string, labels ...string) (*dto.Metric, error) {
	fam, ok := f[name]
	if !ok {
		var names []string
		for n := range f {
			if strings.HasPrefix(n, "sqlkube_") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		return nil, fmt.Errorf("no metric %s; sqlkube metrics: %s", name, strings.Join(names, ", "))
	}
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("no series %s{%s} among %d series", name, strings.Join(labels, ","), len(fam.GetMetric()))
}

// gauge is the value of a gauge series.
func (f metricFamilies) gauge(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m, err := f.find(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetGauge() == nil {
		t.Fatalf("%s is not a gauge", name)
	}
	return m.GetGauge().GetValue()
}

// histogram is a histogram series.
func (f metricFamilies) histogram(t *testing.T, name string, labels ...string) *dto.Histogram {
	t.Helper()
	m, err := f.find(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetHistogram() == nil {
		t.Fatalf("%s is not a histogram", name)
	}
	return m.GetHistogram()
}

// awaitMetric scrapes until cond holds for the scrape, failing the test at
// the deadline with what the last scrape said.
func (s *server) awaitMetric(t *testing.T, what string, cond func(metricFamilies) (ok bool, got string)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, got := cond(s.scrape(t))
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after %v", what, got, waitFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gaugeIs waits until the gauge satisfies cond.
func (s *server) gaugeIs(t *testing.T, name, want string, cond func(float64) bool) {
	t.Helper()
	s.awaitMetric(t, name+" "+want, func(f metricFamilies) (bool, string) {
		m, err := f.find(name)
		if err != nil {
			return false, err.Error()
		}
		v := m.GetGauge().GetValue()
		return cond(v), fmt.Sprint(v)
	})
}

func TestSqlkube_Metrics(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := startServerWith(t, serverConfig{dsn: b.NewDSN(t), metrics: true})
		f := s.scrape(t)
		// Some series exist only once observed; these do from the start.
		if got := f.gauge(t, "sqlkube_store_compacted_revision"); got != 0 {
			t.Errorf("sqlkube_store_compacted_revision of a new store %v, want 0", got)
		}
		if got := f.gauge(t, "sqlkube_store_watchers"); got != 0 {
			t.Errorf("sqlkube_store_watchers before any watch %v, want 0", got)
		}

		r := revs(s.revision(t))
		const puts, gets = 5, 3
		for i := 1; i <= puts; i++ {
			putAll(t, s, fmt.Sprintf("mt/%d", i), fmt.Sprint(i))
		}
		for i := 1; i <= gets; i++ {
			wantOutput(t, "get", s.ctl(t, "get", fmt.Sprintf("mt/%d", i)), fmt.Sprintf("mt/%d", i), fmt.Sprint(i))
		}
		w := s.startWatch(t, "mt/", "--prefix")
		syncWatch(t, s, w, "mt/sync") // puts of its own

		f = s.scrape(t)
		for _, c := range []struct {
			method string
			min    uint64
		}{{"Put", puts + 1}, {"Range", gets}} {
			h := f.histogram(t, "sqlkube_etcd_rpc_duration_seconds", "method="+c.method, "code=OK")
			if h.GetSampleCount() < c.min || h.GetSampleSum() <= 0 {
				t.Errorf("sqlkube_etcd_rpc_duration_seconds{method=%q}: %d calls taking %vs, want at least %d taking some time",
					c.method, h.GetSampleCount(), h.GetSampleSum(), c.min)
			}
		}
		for _, kind := range []string{"write", "read"} {
			h := f.histogram(t, "sqlkube_sql_transaction_duration_seconds", "kind="+kind)
			if h.GetSampleCount() < 1 || h.GetSampleSum() <= 0 {
				t.Errorf("sqlkube_sql_transaction_duration_seconds{kind=%q}: %d transactions taking %vs, want some", kind, h.GetSampleCount(), h.GetSampleSum())
			}
		}
		// Every write request is in one batch: the batches hold at least
		// the puts, and none is empty.
		batch := f.histogram(t, "sqlkube_sql_group_commit_batch_size")
		if batch.GetSampleSum() < puts+1 || batch.GetSampleCount() < 1 || float64(batch.GetSampleCount()) > batch.GetSampleSum() {
			t.Errorf("sqlkube_sql_group_commit_batch_size: %d batches holding %v requests, want at least %d requests, none empty",
				batch.GetSampleCount(), batch.GetSampleSum(), puts+1)
		}
		if got := f.gauge(t, "sqlkube_store_db_size_bytes"); got <= 0 {
			t.Errorf("sqlkube_store_db_size_bytes %v, want > 0", got)
		}
		s.gaugeIs(t, "sqlkube_store_watchers", ">= 1 while a watch runs", func(v float64) bool { return v >= 1 })
		if got := f.gauge(t, "sqlkube_etcd_watch_streams"); got < 1 {
			t.Errorf("sqlkube_etcd_watch_streams %v while a watch runs, want >= 1", got)
		}

		// The revision gauges follow the store.
		var st []struct{ Status pb.StatusResponse }
		s.ctlJSON(t, &st, "endpoint", "status")
		if len(st) != 1 {
			t.Fatalf("endpoint status: %d entries, want 1", len(st))
		}
		cur := st[0].Status.Header.Revision
		if cur < r.at(puts+1) {
			t.Fatalf("endpoint status revision %d, want at least %d", cur, r.at(puts+1))
		}
		s.gaugeIs(t, "sqlkube_store_current_revision", fmt.Sprintf("= %d (endpoint status)", cur), func(v float64) bool { return v == float64(cur) })
		wantOutput(t, "compaction", s.ctl(t, "compaction", r.s(3)), "compacted revision "+r.s(3))
		s.gaugeIs(t, "sqlkube_store_compacted_revision", "= "+r.s(3), func(v float64) bool { return v == float64(r.at(3)) })
		putAll(t, s, "mt/after", "x")
		s.gaugeIs(t, "sqlkube_store_current_revision", fmt.Sprintf("= %d after one more put", cur+1), func(v float64) bool { return v == float64(cur+1) })

		w.stop()
		s.gaugeIs(t, "sqlkube_store_watchers", "0 once the watch ended", func(v float64) bool { return v == 0 })
	})
}
