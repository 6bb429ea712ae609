// Package stablemetrics reads the stable and beta metrics Kubernetes
// declares for a component, with their types, labels and buckets, and
// checks a served metric family against its declaration. Tests use it to
// hold sqlkube's components to Kubernetes' stability guarantees.
package stablemetrics

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

// Metric is a metric as Kubernetes declares it: its fully qualified
// name, type (Counter, Gauge, Histogram... or Custom for a collector's
// description), stability level, label names and, for a histogram, its
// buckets.
type Metric struct {
	Name    string
	Type    string
	Level   string
	Labels  []string
	Buckets []float64
	// Where it is declared (a directory of the module cache, or the list).
	Dir string
}

// The packages (and the packages below them) that declare each
// component's metrics, as module/path.
var (
	// APIServer: Kubernetes' API server library, the aggregator's and
	// the CRD server's, kube-apiserver's service-account token
	// authenticator, and the process-wide families kube-apiserver serves
	// (build info, feature gates, the registry's own counts, health
	// checks).
	APIServer = []string{
		"k8s.io/apiserver/pkg",
		"k8s.io/kube-aggregator/pkg",
		"k8s.io/apiextensions-apiserver/pkg",
		"k8s.io/kubernetes/pkg/serviceaccount",
		"k8s.io/component-base/metrics/prometheus/version",
		"k8s.io/component-base/metrics/prometheus/feature",
		"k8s.io/component-base/metrics/prometheus/meta",
		"k8s.io/component-base/metrics/prometheus/slis",
	}
	// Scheduler: kube-scheduler's own families.
	Scheduler = []string{"k8s.io/kubernetes/pkg/scheduler/metrics"}
	// ControllerManager: the controllers' families, the volume
	// operations' (the attach/detach and persistent-volume controllers),
	// the work queues' and the managed-controllers gauge.
	ControllerManager = []string{
		"k8s.io/kubernetes/pkg/controller",
		"k8s.io/kubernetes/pkg/volume/util",
		"k8s.io/component-base/metrics/prometheus/workqueue",
		"k8s.io/component-base/metrics/prometheus/controllers",
	}
	// Kubelet: the kubelet's families on /metrics, /metrics/resource and
	// /metrics/probes, and the volume operations'.
	Kubelet = []string{
		"k8s.io/kubernetes/pkg/kubelet",
		"k8s.io/kubernetes/pkg/volume/util",
	}
)

// List is the stable and beta metrics (and alsoChecked) declared in
// packages, for the modules of go.mod, as the module cache holds them.
// Kubernetes' own list, test/instrumentation/testdata/stable-metrics-list.yaml,
// gives their types, labels and buckets when the k8s.io/kubernetes module
// has it; the v1.37.2 module zip does not (test/instrumentation is left
// out of it, and no other module of the cache holds the list), so they
// are then read as Kubernetes' own tool reads them, from the metric
// declarations (metricsFromSource). source says which; ok is false if the
// module cache is not there.
func List(t testing.TB, packages []string) (list []Metric, source string, ok bool) {
	t.Helper()
	modules := []string{"k8s.io/kubernetes"}
	for _, pkg := range packages {
		parts := strings.SplitN(pkg, "/", 3) // k8s.io, module, path
		modules = append(modules, parts[0]+"/"+parts[1])
	}
	dirs := moduleDirs(t, modules)
	var pkgDirs []string
	for _, pkg := range packages {
		parts := strings.SplitN(pkg, "/", 3)
		dir := dirs[parts[0]+"/"+parts[1]]
		if dir == "" {
			return nil, "", false
		}
		pkgDirs = append(pkgDirs, filepath.Join(dir, parts[2]))
	}
	list = metricsFromSource(t, pkgDirs)
	source = "the STABLE and BETA declarations of " + strings.Join(packages, ", ") + " in the module cache"
	listFile := filepath.Join(dirs["k8s.io/kubernetes"], "test", "instrumentation", "testdata", "stable-metrics-list.yaml")
	data, err := os.ReadFile(listFile)
	if err != nil {
		return list, source, true
	}
	var entries []struct {
		Name, Subsystem, Namespace, Type, StabilityLevel string
		Labels                                           []string
		Buckets                                          []float64
	}
	if err := yaml.Unmarshal(data, &entries); err != nil {
		t.Fatalf("%s: %v", listFile, err)
	}
	listed := map[string]Metric{}
	for _, e := range entries {
		name := fqName(e.Namespace, e.Subsystem, e.Name)
		listed[name] = Metric{Name: name, Type: e.Type, Level: e.StabilityLevel, Labels: e.Labels, Buckets: e.Buckets, Dir: listFile}
	}
	for i, m := range list {
		if l, ok := listed[m.Name]; ok {
			list[i] = l
		}
	}
	return list, listFile + ", for the metrics " + source, true
}

// Check reports, as t's errors, how the served family mf differs from
// its declaration m: its type, each series' label names and a
// histogram's buckets.
func Check(t testing.TB, m Metric, mf *dto.MetricFamily) {
	t.Helper()
	wantType := map[string]dto.MetricType{"Counter": dto.MetricType_COUNTER, "Gauge": dto.MetricType_GAUGE, "Histogram": dto.MetricType_HISTOGRAM}
	if wt, ok := wantType[m.Type]; ok && mf.GetType() != wt {
		t.Errorf("%s is a %s, declared a %s", m.Name, mf.GetType(), m.Type)
	}
	wantLabels := slices.Sorted(slices.Values(m.Labels))
	for _, s := range mf.GetMetric() {
		var got []string
		for _, l := range s.GetLabel() {
			got = append(got, l.GetName())
		}
		slices.Sort(got)
		if !slices.Equal(got, wantLabels) {
			t.Errorf("%s has labels %v, declared %v", m.Name, got, wantLabels)
			break
		}
		if m.Type == "Histogram" {
			var bounds []float64
			for _, b := range s.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					bounds = append(bounds, b.GetUpperBound())
				}
			}
			if !slices.Equal(bounds, m.Buckets) {
				t.Errorf("%s has buckets %v, declared %v", m.Name, bounds, m.Buckets)
				break
			}
		}
	}
}

// moduleDirs are where the module cache holds go.mod's versions of
// modules (none for a module it does not hold).
func moduleDirs(t testing.TB, modules []string) map[string]string {
	t.Helper()
	args := append([]string{"list", "-m", "-f", "{{.Path}} {{.Dir}}"}, slices.Compact(slices.Sorted(slices.Values(modules)))...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Logf("go list -m: %v", err)
	}
	dirs := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, dir, ok := strings.Cut(line, " "); ok {
			dirs[path] = dir
		}
	}
	return dirs
}

func fqName(namespace, subsystem, name string) string {
	var parts []string
	for _, p := range []string{namespace, subsystem, name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "_")
}

// constructors are component-base's metric constructors by the type they
// make.
var constructors = map[string]string{
	"NewCounter": "Counter", "NewCounterVec": "Counter", "NewGauge": "Gauge", "NewGaugeVec": "Gauge",
	"NewHistogram": "Histogram", "NewHistogramVec": "Histogram", "NewSummary": "Summary", "NewSummaryVec": "Summary",
	"NewTimingHistogram": "TimingHistogram", "NewTimingHistogramVec": "TimingHistogram", "NewDesc": "Custom",
}

// metricsFromSource finds the STABLE and BETA metrics (and alsoChecked)
// declared in the Go packages under dirs: calls of component-base's
// constructors whose options (or, for NewDesc, arguments) are literals,
// with names, labels and buckets resolved through the package's constants
// and variables. A stable or beta declaration it cannot resolve fails the
// test.
func metricsFromSource(t testing.TB, dirs []string) []Metric {
	t.Helper()
	seen := map[string]bool{}
	var out []Metric
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(dir string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" || d.Name() == "testing" {
				return filepath.SkipDir
			}
			for _, m := range packageMetrics(t, dir) {
				if !seen[m.Name] {
					seen[m.Name] = true
					out = append(out, m)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("reading %s: %v", root, err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// pkgValues are a package's top-level constants and variables that
// metric declarations refer to.
type pkgValues struct {
	strs   map[string]string
	lists  map[string][]string
	floats map[string][]float64
}

func packageMetrics(t testing.TB, dir string) []Metric {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	declares := false
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		files = append(files, filepath.Join(dir, name))
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		declares = declares || bytes.Contains(data, []byte(".STABLE")) || bytes.Contains(data, []byte(".BETA"))
	}
	if !declares {
		return nil
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		parsed = append(parsed, af)
	}
	vals := pkgValues{strs: map[string]string{}, lists: map[string][]string{}, floats: map[string][]float64{}}
	for _, af := range parsed {
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if s, ok := vals.str(vs.Values[i]); ok {
						vals.strs[name.Name] = s
					} else if l, ok := vals.list(vs.Values[i]); ok {
						vals.lists[name.Name] = l
					} else if f, ok := vals.buckets(vs.Values[i]); ok {
						vals.floats[name.Name] = f
					}
				}
			}
		}
	}
	var out []Metric
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || constructors[sel.Sel.Name] == "" || len(call.Args) == 0 {
				return true
			}
			m, ok := vals.declaration(sel.Sel.Name, call)
			if !ok || (m.Level == "ALPHA" && !alsoChecked[m.Name]) {
				return true
			}
			if m.Name == "" || (m.Type == "Histogram" && m.Buckets == nil) || m.Labels == nil && len(call.Args) > 1 {
				t.Errorf("%s: cannot resolve the %s metric declared at %s", dir, m.Level, fset.Position(call.Pos()))
				return true
			}
			m.Dir = dir
			out = append(out, m)
			return true
		})
	}
	return out
}

// declaration reads one constructor call; ok is false unless the metric
// is STABLE or BETA.
func (v pkgValues) declaration(fn string, call *ast.CallExpr) (m Metric, ok bool) {
	m.Type = constructors[fn]
	if fn == "NewDesc" {
		if len(call.Args) < 5 {
			return m, false
		}
		m.Level = level(call.Args[4])
		m.Name, _ = v.str(call.Args[0])
		m.Labels, _ = v.list(call.Args[2])
		return m, m.Level != ""
	}
	opts := call.Args[0]
	if u, isAddr := opts.(*ast.UnaryExpr); isAddr {
		opts = u.X
	}
	lit, isLit := opts.(*ast.CompositeLit)
	if !isLit {
		return m, false
	}
	var namespace, subsystem string
	explicitBuckets := false
	for _, el := range lit.Elts {
		kv, isKV := el.(*ast.KeyValueExpr)
		if !isKV {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil {
			continue
		}
		switch key.Name {
		case "Namespace":
			namespace, _ = v.str(kv.Value)
		case "Subsystem":
			subsystem, _ = v.str(kv.Value)
		case "Name":
			m.Name, _ = v.str(kv.Value)
		case "StabilityLevel":
			m.Level = level(kv.Value)
		case "Buckets":
			explicitBuckets = true
			m.Buckets, _ = v.buckets(kv.Value)
		}
	}
	if m.Level == "" {
		return m, false
	}
	if m.Name != "" {
		m.Name = fqName(namespace, subsystem, m.Name)
	}
	if m.Type == "Histogram" && !explicitBuckets {
		m.Buckets = prometheus.DefBuckets
	}
	m.Labels = []string{}
	if len(call.Args) > 1 {
		m.Labels, _ = v.list(call.Args[1])
	}
	return m, true
}

func level(e ast.Expr) string {
	if sel, ok := e.(*ast.SelectorExpr); ok && (sel.Sel.Name == "STABLE" || sel.Sel.Name == "BETA" || sel.Sel.Name == "ALPHA") {
		return sel.Sel.Name
	}
	return ""
}

// alsoChecked are alpha metrics checked as the stable ones are: the SLI
// latency, which kube-apiserver's SLOs are computed from.
var alsoChecked = map[string]bool{"apiserver_request_sli_duration_seconds": true}

func (v pkgValues) str(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.Ident:
		s, ok := v.strs[e.Name]
		return s, ok
	case *ast.SelectorExpr:
		// metrics.APIServerComponent and the like, from another package.
		if e.Sel.Name == "APIServerComponent" {
			return "apiserver", true
		}
	}
	return "", false
}

func (v pkgValues) list(e ast.Expr) ([]string, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		if e.Name == "nil" {
			return []string{}, true
		}
		l, ok := v.lists[e.Name]
		return l, ok
	case *ast.CompositeLit:
		if at, ok := e.Type.(*ast.ArrayType); !ok || !isIdent(at.Elt, "string") {
			return nil, false
		}
		l := []string{}
		for _, el := range e.Elts {
			s, ok := v.str(el)
			if !ok {
				return nil, false
			}
			l = append(l, s)
		}
		return l, true
	}
	return nil, false
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func (v pkgValues) buckets(e ast.Expr) ([]float64, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		f, ok := v.floats[e.Name]
		return f, ok
	case *ast.CompositeLit:
		if at, ok := e.Type.(*ast.ArrayType); !ok || !isIdent(at.Elt, "float64") {
			return nil, false
		}
		var f []float64
		for _, el := range e.Elts {
			x, ok := number(el)
			if !ok {
				return nil, false
			}
			f = append(f, x)
		}
		return f, true
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if !ok || len(e.Args) != 3 {
			return nil, false
		}
		var a [3]float64
		for i, arg := range e.Args {
			if a[i], ok = number(arg); !ok {
				return nil, false
			}
		}
		switch sel.Sel.Name {
		case "ExponentialBuckets":
			return prometheus.ExponentialBuckets(a[0], a[1], int(a[2])), true
		case "LinearBuckets":
			return prometheus.LinearBuckets(a[0], a[1], int(a[2])), true
		case "ExponentialBucketsRange":
			return prometheus.ExponentialBucketsRange(a[0], a[1], int(a[2])), true
		}
	}
	return nil, false
}

func number(e ast.Expr) (float64, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.INT || e.Kind == token.FLOAT {
			f, err := strconv.ParseFloat(e.Value, 64)
			return f, err == nil
		}
	case *ast.UnaryExpr:
		if e.Op == token.SUB {
			f, ok := number(e.X)
			return -f, ok
		}
	case *ast.ParenExpr:
		return number(e.X)
	}
	return 0, false
}
