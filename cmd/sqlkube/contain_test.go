package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// faultSink is the klog logger of the server's components in
// TestServer_ControllerPanicIsContained: it drops their logs, and the
// first time the endpoints controller says it finished syncing the
// Service default/boom it indexes an empty slice. That runs inside the
// controller's worker, as a bug of its own would: a fault injected into a
// real embedded controller from the test alone (kube-controller-manager
// takes its logger from the command's context).
type faultSink struct {
	name  string
	fired *atomic.Bool
}

func (faultSink) Init(logr.RuntimeInfo) {}
func (faultSink) Enabled(int) bool      { return true }

func (s faultSink) Info(_ int, msg string, kv ...any) {
	if msg != "Finished syncing service endpoints" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "service" && fmt.Sprint(kv[i+1]) == "default/boom" && s.fired.CompareAndSwap(false, true) {
			var subsets []corev1.EndpointSubset
			_ = subsets[0]
		}
	}
}

func (faultSink) Error(error, string, ...any)      {}
func (s faultSink) WithValues(...any) logr.LogSink { return s }
func (s faultSink) Name() string                   { return s.name }
func (s faultSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return faultSink{name: name, fired: s.fired}
}

// captureStderr sends the process's standard error to a pipe until the
// test's end (cleanups registered later run before it ends), and returns
// what came through so far.
func captureStderr(t *testing.T) (read func() string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	old := os.Stderr
	os.Stderr = w
	t.Cleanup(func() {
		os.Stderr = old
		w.Close()
		<-done
		r.Close()
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
}

// panicsServed is sqlkube_component_panics_total{component} as the
// server's /metrics says.
func panicsServed(ctx context.Context, cs kubernetes.Interface, component string) (float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	prefix := `sqlkube_component_panics_total{component="` + component + `"} `
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, nil
}

// TestServer_ControllerPanicIsContained: a panic in an embedded
// controller's worker (the endpoints controller, with one worker) is
// logged with its stack and counted on /metrics; the API goes on
// answering and the same worker syncs a later Service.
func TestServer_ControllerPanicIsContained(t *testing.T) {
	stderr := captureStderr(t)
	ctx := context.Background()
	sink := faultSink{fired: &atomic.Bool{}}
	cfg := startTestServerContext(t, klog.NewContext(ctx, logr.New(sink)),
		"--kube-controller-manager-arg=--concurrent-endpoint-syncs=1", "--disable-scheduler")
	cs := kubernetes.NewForConfigOrDie(cfg)
	before, err := panicsServed(ctx, cs, "controller-manager")
	if err != nil {
		t.Fatal(err)
	}

	service := func(name string) {
		t.Helper()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	service("boom")
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := panicsServed(ctx, cs, "controller-manager")
		return err == nil && n > before, nil
	})
	if err != nil {
		t.Fatalf("no panic counted on /metrics (injected: %v); stderr:\n%s", sink.fired.Load(), stderr())
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatalf("the API stopped answering after the panic: %v", err)
	}

	// The endpoints controller's only worker runs again and syncs a
	// Service made after the panic.
	service("later")
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Endpoints("default").Get(ctx, "later", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the endpoints controller synced nothing after its panic: %v", err)
	}
	if n, err := panicsServed(ctx, cs, "controller-manager"); err != nil || n != before+1 {
		t.Errorf("sqlkube_component_panics_total{component=controller-manager} = %v (%v), want %v", n, err, before+1)
	}

	var logged string
	for _, l := range strings.Split(stderr(), "\n") {
		if strings.Contains(l, "recovered a panic") {
			logged = l
		}
	}
	for _, want := range []string{"ERR", "component=controller-manager", "logger=endpoints-controller", "index out of range", "endpoints_controller.go"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the panic's log line lacks %q:\n%s", want, logged)
		}
	}
	if out := stderr(); strings.Contains(out, "\x1b[") {
		t.Errorf("escape sequences in the server's log on a pipe:\n%q", out)
	}
}
