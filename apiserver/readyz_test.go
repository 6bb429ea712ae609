package apiserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlkube/sqlkube/apiserver"
)

// TestServer_ReadyzChecks: a check of Config.ReadyzChecks fails /readyz
// while it fails, with its name and reason, and ?exclude leaves it out as
// kube-apiserver's does; Config.Metrics is served on /metrics.
func TestServer_ReadyzChecks(t *testing.T) {
	var full atomic.Bool
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sqlkube_store_disk_full", Help: "test"})
	reg.MustRegister(g)
	g.Set(1)
	cfg, _ := newServerWith(t, apiserver.Config{
		Metrics: reg,
		ReadyzChecks: []apiserver.ReadyzCheck{{Name: "datastore-disk", Check: func(context.Context) error {
			if full.Load() {
				return errors.New("the disk is full")
			}
			return nil
		}}},
	})
	waitReady(t, cfg)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(cfg.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, "[+]datastore-disk ok\n") {
		t.Errorf("/readyz?verbose with the check passing: %d\n%s", code, body)
	}
	full.Store(true)
	for _, tc := range []struct {
		path  string
		code  int
		lines []string
	}{
		{"/readyz", http.StatusServiceUnavailable, []string{"[+]etcd ok", "[-]datastore-disk failed: the disk is full", "readyz check failed"}},
		{"/readyz?exclude=datastore-disk", http.StatusOK, []string{"ok"}},
		{"/readyz?exclude=datastore-disk&verbose", http.StatusOK, []string{"[+]etcd ok", "[+]datastore-disk excluded: ok", "readyz check passed"}},
		{"/readyz?exclude=nope&exclude=datastore-disk&exclude=etcd&verbose", http.StatusOK, []string{"[+]etcd excluded: ok", `warn: some health checks cannot be excluded: no matches for "nope"`}},
		{"/readyz?exclude=etcd", http.StatusServiceUnavailable, []string{"[-]datastore-disk failed: the disk is full"}},
	} {
		code, body := get(tc.path)
		lines := strings.Split(strings.TrimSpace(body), "\n")
		for _, want := range tc.lines {
			found := false
			for _, l := range lines {
				found = found || l == want
			}
			if !found {
				t.Errorf("%s: no line %q in\n%s", tc.path, want, body)
			}
		}
		if code != tc.code {
			t.Errorf("%s: %d, want %d\n%s", tc.path, code, tc.code, body)
		}
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "\nsqlkube_store_disk_full 1\n") || !strings.Contains(body, "apiserver_request_total") {
		t.Errorf("/metrics: %d, want the API server's families and sqlkube_store_disk_full 1:\n%.2000s", code, body)
	}
}
