// Package fakenodes measures a node simulator (`sqlkube node --fake`, kwok)
// running as a process of its own against an API server: how long N nodes
// take to be Ready, the simulator's CPU once they idle, how fast pods bound
// to them go Running (and are confirmed deleted), and its peak RSS.
package fakenodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Process is a running simulator.
type Process struct {
	PID  int
	Stop func() error
	// Pause and Resume stop and continue it (SIGSTOP, SIGCONT).
	Pause, Resume func() error
}

// Options of one measurement.
type Options struct {
	Client kubernetes.Interface
	// Start starts the simulator process.
	Start func(ctx context.Context) (*Process, error)
	// NodePrefix names the nodes (NodePrefix0 …).
	NodePrefix string
	// CreateNodes: the bench creates the Node objects (with
	// NodeAnnotations and a pod CIDR each) right after Start, for
	// simulators that only manage nodes (kwok).
	CreateNodes     bool
	NodeAnnotations map[string]string
	Nodes, Pods     int
	// Idle is how long the simulator's CPU is sampled once the nodes are
	// Ready (after Settle).
	Idle, Settle time.Duration
	Namespace    string
	// Workers create and delete objects at once.
	Workers int
	// ServerPID, if not 0, is the API server's process: its CPU during
	// the burst is reported too.
	ServerPID int
	Logf      func(format string, args ...any)
}

// Result of one measurement.
type Result struct {
	NodesReady time.Duration
	IdleCPU    float64 // percent of one core
	// FreshLeases is how many of the nodes' Leases were renewed within
	// the last 20 s at the end of the idle time.
	FreshLeases   int
	PodsCreated   time.Duration
	PodsRunning   time.Duration // from the first create until all Running
	PodsDeleted   time.Duration
	PeakRSSMiB    float64
	PodsPerSecond float64
	// Burst: the same number of pods created while the simulator is
	// paused, then from its resumption until all are Running.
	BurstRunning   time.Duration
	BurstPerSecond float64
	// BurstCPU and BurstServerCPU are the CPU time the simulator and the
	// API server (if known) spent per pod of the burst.
	BurstCPU, BurstServerCPU time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("nodes Ready %.1fs | idle CPU %.2f%% of a core, %d leases fresh | pods created %.1fs, all Running %.1fs (%.0f pods/s) | burst: all Running %.1fs after resume (%.0f pods/s; CPU per pod: simulator %v, server %v) | deleted %.1fs | peak RSS %.0f MiB",
		r.NodesReady.Seconds(), r.IdleCPU, r.FreshLeases, r.PodsCreated.Seconds(), r.PodsRunning.Seconds(), r.PodsPerSecond,
		r.BurstRunning.Seconds(), r.BurstPerSecond, r.BurstCPU.Round(time.Microsecond), r.BurstServerCPU.Round(time.Microsecond), r.PodsDeleted.Seconds(), r.PeakRSSMiB)
}

// Run measures once and leaves the cluster as it found it (pods, nodes and
// their leases deleted).
func Run(ctx context.Context, o Options) (Result, error) {
	var res Result
	if o.Workers <= 0 {
		o.Workers = 64
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cs := o.Client
	factory := informers.NewSharedInformerFactory(cs, 0)
	nodes := factory.Core().V1().Nodes().Lister()
	pods := factory.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(cache.NewFilteredListWatchFromClient(c.CoreV1().RESTClient(), "pods", o.Namespace, func(*metav1.ListOptions) {}),
			&corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
	informerCtx, stopInformers := context.WithCancel(ctx)
	factory.Start(informerCtx.Done())
	defer func() { stopInformers(); factory.Shutdown() }()
	factory.WaitForCacheSync(ctx.Done())

	if err := ensureNamespace(ctx, cs, o.Namespace); err != nil {
		return res, err
	}
	start := time.Now()
	proc, err := o.Start(ctx)
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = proc.Stop()
		}
	}()
	if o.CreateNodes {
		if err := parallel(ctx, o.Nodes, o.Workers, func(ctx context.Context, i int) error {
			_, err := cs.CoreV1().Nodes().Create(ctx, kwokNode(o, i), metav1.CreateOptions{})
			return err
		}); err != nil {
			return res, fmt.Errorf("create nodes: %w", err)
		}
	}
	names := make([]string, o.Nodes)
	for i := range names {
		names[i] = o.NodePrefix + strconv.Itoa(i)
	}
	if err := waitCount(ctx, "nodes Ready", o.Nodes, logf, func() int {
		n := 0
		for _, name := range names {
			if node, err := nodes.Get(name); err == nil && nodeReady(node) {
				n++
			}
		}
		return n
	}); err != nil {
		return res, err
	}
	res.NodesReady = time.Since(start)
	logf("%d nodes Ready after %v", o.Nodes, res.NodesReady)

	time.Sleep(o.Settle) // the registration burst's aftermath is not idle
	cpu0, err := cpuTime(proc.PID)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	time.Sleep(o.Idle)
	cpu1, err := cpuTime(proc.PID)
	if err != nil {
		return res, err
	}
	res.IdleCPU = 100 * (cpu1 - cpu0).Seconds() / time.Since(t0).Seconds()
	leases, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, o.NodePrefix) && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < 20*time.Second {
			res.FreshLeases++
		}
	}
	logf("idle CPU %.2f%% of a core; %d leases renewed in the last 20 s", res.IdleCPU, res.FreshLeases)

	// Pods created as fast as the bench can: the simulator runs them as
	// they come.
	podList := pods.GetIndexer()
	running := func() int {
		n := 0
		for _, obj := range podList.List() {
			if p := obj.(*corev1.Pod); p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n
	}
	start = time.Now()
	if res.PodsCreated, err = createPods(ctx, o, names, 0); err != nil {
		return res, err
	}
	if err := waitCount(ctx, "pods Running", o.Pods, logf, running); err != nil {
		return res, err
	}
	res.PodsRunning = time.Since(start)
	res.PodsPerSecond = float64(o.Pods) / res.PodsRunning.Seconds()
	logf("%d pods Running after %v (created in %v)", o.Pods, res.PodsRunning, res.PodsCreated)

	// A burst: as many pods again, created while the simulator is
	// paused; how fast it turns them Running once resumed.
	if err := proc.Pause(); err != nil {
		return res, err
	}
	if _, err := createPods(ctx, o, names, o.Pods); err != nil {
		_ = proc.Resume()
		return res, err
	}
	if err := waitCount(ctx, "pods listed", 2*o.Pods, logf, func() int { return len(podList.ListKeys()) }); err != nil {
		_ = proc.Resume()
		return res, err
	}
	simCPU0, _ := cpuTime(proc.PID)
	var srvCPU0 time.Duration
	if o.ServerPID != 0 {
		srvCPU0, _ = cpuTime(o.ServerPID)
	}
	start = time.Now()
	if err := proc.Resume(); err != nil {
		return res, err
	}
	logf("burst: %d pods created, simulator resumed", o.Pods)
	if err := waitCount(ctx, "burst pods Running", 2*o.Pods, logf, running); err != nil {
		return res, err
	}
	res.BurstRunning = time.Since(start)
	simCPU1, _ := cpuTime(proc.PID)
	res.BurstCPU = (simCPU1 - simCPU0) / time.Duration(o.Pods)
	if o.ServerPID != 0 {
		srvCPU1, _ := cpuTime(o.ServerPID)
		res.BurstServerCPU = (srvCPU1 - srvCPU0) / time.Duration(o.Pods)
	}
	res.BurstPerSecond = float64(o.Pods) / res.BurstRunning.Seconds()
	logf("burst: %d pods Running %v after resume", o.Pods, res.BurstRunning)

	// Deleted pods go once the simulator confirms.
	start = time.Now()
	// (One request per pod, as controllers delete: a deletecollection
	// of 20,000 pods is one long request.)
	if err := parallel(ctx, 2*o.Pods, o.Workers, func(ctx context.Context, i int) error {
		err := cs.CoreV1().Pods(o.Namespace).Delete(ctx, fmt.Sprintf("p-%d", i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return err
	}); err != nil {
		return res, fmt.Errorf("delete pods: %w", err)
	}
	if err := waitCount(ctx, "pods gone", 0, logf, func() int { return len(podList.ListKeys()) }); err != nil {
		return res, err
	}
	res.PodsDeleted = time.Since(start)
	if res.PeakRSSMiB, err = peakRSS(proc.PID); err != nil {
		return res, err
	}
	stopped = true
	if err := proc.Stop(); err != nil {
		logf("simulator stopped with %v", err)
	}
	// Leave the cluster as it was: the nodes and their leases go too.
	err = parallel(ctx, o.Nodes, o.Workers, func(ctx context.Context, i int) error {
		err := cs.CoreV1().Nodes().Delete(ctx, names[i], metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			err = cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, names[i], metav1.DeleteOptions{})
		}
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return err
	})
	return res, err
}

// createPods creates o.Pods pods p-from … spread over the nodes, and
// returns how long that took.
func createPods(ctx context.Context, o Options, nodes []string, from int) (time.Duration, error) {
	start := time.Now()
	err := parallel(ctx, o.Pods, o.Workers, func(ctx context.Context, i int) error {
		_, err := o.Client.CoreV1().Pods(o.Namespace).Create(ctx, benchPod(nodes[i%len(nodes)], from+i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("create pods: %w", err)
	}
	return time.Since(start), nil
}

func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func kwokNode(o Options, i int) *corev1.Node {
	name := o.NodePrefix + strconv.Itoa(i)
	cidr := fmt.Sprintf("10.%d.%d.0/24", 128+i>>8, i&0xff)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: o.NodeAnnotations, Labels: map[string]string{"type": "kwok", corev1.LabelHostname: name}},
		Spec:       corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
	}
}

func benchPod(node string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(false),
			TerminationGracePeriodSeconds: new(int64(30)),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitCount polls count (every 100 ms, logging every 10 s) until it
// returns want.
func waitCount(ctx context.Context, what string, want int, logf func(string, ...any), count func() int) error {
	last := time.Now()
	got := -1
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
		got = count()
		if time.Since(last) > 10*time.Second {
			logf("%s: %d of %d", what, got, want)
			last = time.Now()
		}
		return got == want, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %d of %d: %w", what, got, want, err)
	}
	return nil
}

// parallel runs do(0 … n-1) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, n, workers int, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := do(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// cpuTime is the user+system CPU time of process pid (Linux /proc).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) start after ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck, nil
}

// peakRSS is VmHWM of process pid in MiB.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}
