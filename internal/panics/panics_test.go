package panics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/sqlkube/sqlkube/internal/panics"
	"github.com/sqlkube/sqlkube/internal/testlog"
)

// contain runs panics.Contain for one test, logging to the returned
// buffer (JSON lines).
func contain(t *testing.T) *testlog.Buffer {
	t.Helper()
	out := &testlog.Buffer{}
	t.Cleanup(panics.Contain(zerolog.New(out)))
	return out
}

// served is the value of sqlkube_component_panics_total{component} as
// /metrics serves it (Kubernetes' legacy registry).
func served(t *testing.T, component string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sqlkube_component_panics_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "component" && l.GetValue() == component {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// panickingWorker is a controller worker as Kubernetes writes them: it
// takes keys off a queue and syncs them, and its sync of "boom" indexes
// an empty slice.
func panickingWorker(queue workqueue.TypedInterface[string], synced chan<- string) func(context.Context) {
	return func(ctx context.Context) {
		for {
			key, shutdown := queue.Get()
			if shutdown {
				return
			}
			if key == "boom" {
				var endpoints []string
				_ = endpoints[0]
			}
			synced <- key
			queue.Done(key)
		}
	}
}

func TestContain_WorkerGoesOn(t *testing.T) {
	out := contain(t)
	const component = "github.com/sqlkube/sqlkube/internal/panics_test"
	before := served(t, component)

	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	synced := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// As controllers run their workers: the loop runs the worker
		// again a period after it returns (or panics).
		wait.UntilWithContext(ctx, panickingWorker(queue, synced), time.Millisecond)
	}()
	queue.Add("boom")
	queue.Add("later")
	select {
	case key := <-synced:
		if key != "later" {
			t.Fatalf("synced %q, want later", key)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker synced nothing after its panic; log:\n%s", out)
	}
	cancel()
	queue.ShutDown()
	<-stopped

	if got := served(t, component) - before; got != 1 {
		t.Errorf("sqlkube_component_panics_total{component=%q} went up by %v, want 1", component, got)
	}
	var entry map[string]any
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(lines), out)
	}
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatal(err)
	}
	if entry["level"] != "error" || entry["component"] != component {
		t.Errorf("level %v, component %v; want error, %s", entry["level"], entry["component"], component)
	}
	if p, _ := entry["panic"].(string); !strings.Contains(p, "index out of range") {
		t.Errorf("panic %q, want the index error", p)
	}
	if o, _ := entry["origin"].(string); !strings.Contains(o, "panickingWorker") || !strings.Contains(o, "panics_test.go:") {
		t.Errorf("origin %q, want the worker's line", o)
	}
	if s, _ := entry["stack"].(string); !strings.Contains(s, "panickingWorker") || !strings.Contains(s, "wait.BackoffUntil") {
		t.Errorf("stack does not show the worker under wait.Until:\n%s", s)
	}
}

func TestContain_HandleCrashReturns(t *testing.T) {
	contain(t)
	for name, handle := range map[string]func(){
		"HandleCrash":            func() { defer utilruntime.HandleCrash(); panic("x") },
		"HandleCrashWithContext": func() { defer utilruntime.HandleCrashWithContext(context.Background()); panic("x") },
	} {
		t.Run(name, func(t *testing.T) {
			handle() // panics again (and fails the test) unless contained
		})
	}
}

func TestContain_Undo(t *testing.T) {
	undo := panics.Contain(zerolog.Nop())
	if utilruntime.ReallyCrash {
		t.Fatal("ReallyCrash still on")
	}
	undo()
	if !utilruntime.ReallyCrash || len(utilruntime.PanicHandlers) != 1 {
		t.Fatalf("undo left ReallyCrash=%v and %d handlers", utilruntime.ReallyCrash, len(utilruntime.PanicHandlers))
	}
}

// namedSink is a logr sink that tells its name, as sqlkube's klog sink
// does.
type namedSink struct{ name string }

func (namedSink) Init(logr.RuntimeInfo)               {}
func (namedSink) Enabled(int) bool                    { return false }
func (namedSink) Info(int, string, ...any)            {}
func (namedSink) Error(error, string, ...any)         {}
func (s namedSink) WithValues(...any) logr.LogSink    { return s }
func (s namedSink) WithName(name string) logr.LogSink { return namedSink{name: s.name + "/" + name} }
func (s namedSink) Name() string                      { return s.name }

func TestContain_LogsTheLoggersName(t *testing.T) {
	out := contain(t)
	// kube-controller-manager names each controller's logger.
	ctx := klog.NewContext(context.Background(), logr.New(namedSink{name: "endpoints-controller"}))
	func() { defer utilruntime.HandleCrashWithContext(ctx); panic("x") }()
	if !strings.Contains(out.String(), `"logger":"endpoints-controller"`) {
		t.Errorf("log lacks the logger's name:\n%s", out)
	}
}

func TestContain_AbortHandlerIsNoFault(t *testing.T) {
	out := contain(t)
	func() { defer utilruntime.HandleCrash(); panic(http.ErrAbortHandler) }()
	if out.String() != "" {
		t.Errorf("logged %s", out)
	}
}

func TestComponent(t *testing.T) {
	frames := func(fns ...string) []runtime.Frame {
		var out []runtime.Frame
		for _, f := range fns {
			out = append(out, runtime.Frame{Function: f})
		}
		return out
	}
	for _, tc := range []struct {
		origin []runtime.Frame
		want   string
	}{
		{frames("k8s.io/kubernetes/pkg/controller/endpoint.(*Controller).syncService", "k8s.io/apimachinery/pkg/util/wait.BackoffUntil"), "controller-manager"},
		// A panic inside a shared library is the caller's.
		{frames("k8s.io/client-go/rest.(*Request).Do", "k8s.io/kubernetes/pkg/scheduler/framework.(*Handle).Bind"), "scheduler"},
		{frames("k8s.io/kubernetes/pkg/kubelet/pleg.(*GenericPLEG).Relist"), "kubelet"},
		{frames("github.com/sqlkube/sqlkube/node/kubelet.Run.func1"), "kubelet"},
		{frames("github.com/sqlkube/sqlkube/node/podnet.Run"), "node"},
		{frames("github.com/sqlkube/sqlkube/schedulerx.F"), "github.com/sqlkube/sqlkube/schedulerx"},
		{frames("github.com/coredns/coredns/plugin/kubernetes.(*Kubernetes).ServeDNS"), "coredns"},
		{frames("main.main.func1"), "main"},
		{nil, "unknown"},
	} {
		if got := panics.Component(tc.origin); got != tc.want {
			t.Errorf("Component(%v) = %q, want %q", tc.origin[0:min(1, len(tc.origin))], got, tc.want)
		}
	}
}

func TestOrigin(t *testing.T) {
	stack := []runtime.Frame{
		{Function: "github.com/sqlkube/sqlkube/internal/panics.record"},
		{Function: "k8s.io/apimachinery/pkg/util/runtime.handleCrash"},
		{Function: "runtime.gopanic"},
		{Function: "runtime.goPanicIndex"},
		{Function: "k8s.io/kubernetes/pkg/controller/endpoint.(*Controller).syncService"},
		{Function: "k8s.io/apimachinery/pkg/util/wait.BackoffUntil"},
	}
	got := panics.Origin(stack)
	if len(got) != 2 || got[0].Function != stack[4].Function {
		t.Errorf("Origin = %v, want from syncService", got)
	}
	if got := panics.Origin(stack[:2]); got != nil {
		t.Errorf("Origin without a panic = %v", got)
	}
}
