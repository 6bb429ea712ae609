package sqlstore_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// describing records the names of the families registered with it.
type describing struct {
	mu    sync.Mutex
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describing) Unregister(prometheus.Collector) bool { return true }

// TestDashboard_Metrics checks that every sqlkube_* metric the SQL store's
// Grafana dashboard (monitoring/grafana/sqlkube-store.json) queries is
// one the store declares (a histogram's _bucket, _sum and _count series
// included), and that every panel has a query.
func TestDashboard_Metrics(t *testing.T) {
	path := filepath.Join("..", "..", "monitoring", "grafana", "sqlkube-store.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	reg := &describing{names: map[string]bool{}}
	openWith(t, sqlstore.Options{DSN: "sqlite://" + filepath.Join(t.TempDir(), "state.db"), Registerer: reg})
	if len(reg.names) == 0 {
		t.Fatal("the store registered no family")
	}

	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, s)
			}
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range regexp.MustCompile(`\bsqlkube_[a-z_]+`).FindAllString(e, -1) {
			used[name] = true
		}
	}
	if len(used) == 0 {
		t.Fatal("the dashboard queries no sqlkube_* metric")
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range used {
			if !yield(n) {
				return
			}
		}
	}) {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && !reg.names[name] && reg.names[base] {
				family = base
			}
		}
		if !reg.names[family] {
			t.Errorf("the dashboard queries %s, which the store does not declare", name)
		}
	}
	t.Logf("%d metrics queried, of the %d families the store declares", len(used), len(reg.names))
}
