// Package panics keeps a panic in an embedded Kubernetes component from
// ending the process.
//
// Kubernetes' components recover the panics of their goroutines with
// k8s.io/apimachinery/pkg/util/runtime (HandleCrash,
// HandleCrashWithContext, HandleCrashWithLogger): wait.Until and its
// relatives wrap every run of a worker in it. Upstream, HandleCrash
// panics again (ReallyCrash) so that the process dies and its supervisor
// restarts it, which is right when the process is one component. sqlkube
// runs the API server, the controllers, the scheduler, the node and DNS in
// one process, so Contain turns that off: a recovered panic is logged with
// its stack, counted in sqlkube_component_panics_total, and the goroutine
// that recovered it goes on (a wait.Until loop runs its worker again at
// its next period).
//
// What Contain cannot reach: a panic in a goroutine nothing recovers still
// ends the process, and so does os.Exit; docs/architecture.md lists where
// the embedded components can still do either.
package panics

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Total counts the panics recovered since the process started, by the
// component they happened in (Component). It is registered in Kubernetes'
// legacy registry, which every /metrics of sqlkube serves.
var Total = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "sqlkube", Name: "component_panics_total",
	Help: "Panics recovered in a component's goroutine, which went on instead of ending the process, by component.",
}, []string{"component"})

var register sync.Once

// mu guards what Contain changes in k8s.io/apimachinery/pkg/util/runtime.
var mu sync.Mutex

// Contain makes the panics Kubernetes' crash handlers recover in this
// process logged on log (error level, with the panic's stack and the
// component it happened in) and counted in Total, instead of ending the
// process. Call it once a process knows its logger, before components
// start. undo restores what was there before (for tests).
func Contain(log zerolog.Logger) (undo func()) {
	register.Do(func() { legacyregistry.RawMustRegister(Total) })
	mu.Lock()
	defer mu.Unlock()
	crash, handlers := utilruntime.ReallyCrash, utilruntime.PanicHandlers
	utilruntime.ReallyCrash = false
	// Ours replaces upstream's logPanic, which logs the same through klog.
	utilruntime.PanicHandlers = []func(context.Context, any){func(ctx context.Context, r any) { record(ctx, log, r) }}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		utilruntime.ReallyCrash, utilruntime.PanicHandlers = crash, handlers
	}
}

// maxStack bounds the stack logged with a panic, as net/http does.
const maxStack = 64 << 10

// record logs and counts one recovered panic. It runs on the panicking
// goroutine, inside the deferred crash handler, so the stack still holds
// the frames that panicked.
func record(ctx context.Context, log zerolog.Logger, r any) {
	if r == http.ErrAbortHandler {
		return // a handler's way to abort a response, not a fault
	}
	stack := make([]byte, maxStack)
	stack = stack[:runtime.Stack(stack, false)]
	origin := Origin(callers())
	component := Component(origin)
	Total.WithLabelValues(component).Inc()
	ev := log.Error().Str("component", component).Str("panic", fmt.Sprint(r))
	if len(origin) > 0 {
		ev = ev.Str("origin", origin[0].Function+" "+origin[0].File+":"+fmt.Sprint(origin[0].Line))
	}
	if name := loggerName(ctx); name != "" {
		ev = ev.Str("logger", name)
	}
	ev.Str("stack", string(stack)).Msg("recovered a panic: the component goes on")
}

// loggerName is the name of the contextual logger in ctx (a controller's
// name in kube-controller-manager, which names each controller's logger),
// when its sink tells it with a Name method.
func loggerName(ctx context.Context) string {
	if n, ok := klog.FromContext(ctx).GetSink().(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}

// callers are the frames of the calling goroutine, innermost first.
func callers() []runtime.Frame {
	pcs := make([]uintptr, 128)
	pcs = pcs[:runtime.Callers(1, pcs)]
	frames := runtime.CallersFrames(pcs)
	var out []runtime.Frame
	for {
		f, more := frames.Next()
		out = append(out, f)
		if !more {
			return out
		}
	}
}

// Origin is the part of a recovering goroutine's stack (innermost first)
// below the panic: from the function that panicked outwards. It is empty
// when the stack holds no panic.
func Origin(stack []runtime.Frame) []runtime.Frame {
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i].Function != "runtime.gopanic" {
			continue
		}
		rest := stack[i+1:]
		// The runtime's own frames that raised it (a nil dereference, an
		// index out of range) are not the origin.
		for len(rest) > 0 && strings.HasPrefix(rest[0].Function, "runtime.") {
			rest = rest[1:]
		}
		return rest
	}
	return nil
}

// components name the embedded components by the packages their code is
// in: the first package of a panic's origin (innermost first) found here
// names its component.
var components = []struct{ prefix, name string }{
	{"k8s.io/kubernetes/pkg/controller/", "controller-manager"},
	{"k8s.io/kubernetes/cmd/kube-controller-manager/", "controller-manager"},
	{"k8s.io/controller-manager/", "controller-manager"},
	{"github.com/sqlkube/sqlkube/controllers/", "controller-manager"},
	{"k8s.io/kubernetes/pkg/scheduler/", "scheduler"},
	{"k8s.io/kubernetes/cmd/kube-scheduler/", "scheduler"},
	{"k8s.io/kube-scheduler/", "scheduler"}, // the framework's interfaces, since 1.35
	{"github.com/sqlkube/sqlkube/scheduler", "scheduler"},
	{"k8s.io/kubernetes/pkg/kubelet/", "kubelet"},
	{"k8s.io/kubernetes/pkg/volume/", "kubelet"},
	{"k8s.io/kubernetes/cmd/kubelet/", "kubelet"},
	{"k8s.io/cri-client/", "kubelet"},
	{"k8s.io/cri-streaming/", "kubelet"},
	{"github.com/sqlkube/sqlkube/node/kubelet", "kubelet"},
	{"k8s.io/kubernetes/pkg/proxy/", "kube-proxy"},
	{"k8s.io/kubernetes/cmd/kube-proxy/", "kube-proxy"},
	{"github.com/sqlkube/sqlkube/node/kubeproxy", "kube-proxy"},
	{"github.com/coredns/", "coredns"},
	{"github.com/sqlkube/sqlkube/clusterdns", "coredns"},
	{"github.com/sqlkube/sqlkube/node/fake", "fake-node"},
	{"github.com/sqlkube/sqlkube/node/", "node"},
	{"github.com/sqlkube/sqlkube/apiserver", "apiserver"},
	{"k8s.io/apiserver/", "apiserver"},
	{"github.com/sqlkube/sqlkube/storage", "storage"},
	{"github.com/sqlkube/sqlkube/etcdshim", "etcdshim"},
	{"github.com/sqlkube/sqlkube/election", "election"},
}

// Component names the component a panic's origin (Origin) is in: the
// first of its frames in a package of a known component, else the package
// of the function that panicked, else "unknown". Shared libraries
// (client-go, apimachinery) name no component, so a panic inside them is
// put on the component that called them.
func Component(origin []runtime.Frame) string {
	for _, f := range origin {
		pkg := packagePath(f.Function)
		for _, c := range components {
			if under(pkg, c.prefix) {
				return c.name
			}
		}
	}
	if len(origin) > 0 {
		if pkg := packagePath(origin[0].Function); pkg != "" {
			return pkg
		}
	}
	return "unknown"
}

// under reports whether the package pkg is prefix (a package, or a
// folder when it ends in "/") or inside it.
func under(pkg, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// packagePath is the import path of a function's package, from its full
// name ("k8s.io/kubernetes/pkg/controller/endpoint.(*Controller).worker").
func packagePath(function string) string {
	slash := strings.LastIndex(function, "/")
	dot := strings.Index(function[slash+1:], ".")
	if dot < 0 {
		return function
	}
	return function[:slash+1+dot]
}
