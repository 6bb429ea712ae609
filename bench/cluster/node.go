package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/images"
	"github.com/sqlkube/sqlkube/node/mounts"
)

// NodeImage is the image the node benchmark runs: the host's static
// busybox, made into an image and imported (no registry needed).
const NodeImage = "sqlkube.local/busybox:bench"

// NodeResult is one run of the real-node benchmark.
type NodeResult struct {
	// Startup are the pods' create-to-Running latencies, sorted.
	Startup []time.Duration
	// Idle is the server, IdleKubelet its kubelet (a child process) and
	// IdleContainerd its containerd over the window with IdlePods pods
	// running; Bare is a server without a node over the same window.
	IdlePods                          int
	Idle, IdleKubelet, IdleContainerd IdleSample
	Bare                              IdleSample
	StartupWall                       time.Duration
	// Phases split Startup at the runtime's own times.
	Phases StartupPhases
}

// Percentile of sorted latencies (q in 0..1).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// RunNode starts `sqlkube server` with its host's node, imports NodeImage,
// creates pods pods (workers at a time, at rate pods per second when rate
// is above 0) and measures each one's create to Running; then, with idlePods pods running, the server's and containerd's
// CPU over window after warmup, and the same for a server without a node.
func (s Setup) RunNode(ctx context.Context, pods, workers int, rate float64, idlePods int, warmup, window time.Duration) (NodeResult, error) {
	var res NodeResult
	dir, err := os.MkdirTemp(s.TempDir, "sqlkube-bench-node-")
	if err != nil {
		return res, err
	}
	defer func() {
		if !s.Keep {
			// The node's bridge, rules and cgroups stay on the host
			// when it stops (its containers would too): remove them as
			// a user does. The server has stopped by now.
			if out, err := exec.Command(s.Sqlkube, "reset", "--data-dir", filepath.Join(dir, "data"), "--purge").CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "bench node: sqlkube reset: %v\n%s", err, out)
			}
			_ = mounts.DetachUnder(dir)
			os.RemoveAll(dir)
		}
	}()
	port, err := freePort()
	if err != nil {
		return res, err
	}
	srv, err := StartServer(ctx, s.Sqlkube, filepath.Join(dir, "data"), "--disable-node=false", "--node-name", "bench-node", fmt.Sprintf("--kubelet-arg=--port=%d", port))
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	cfg, err := srv.RESTConfig()
	if err != nil {
		return res, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	defer cleanupPods(cs)
	if err := WaitReadyNodes(ctx, cs, 1); err != nil {
		return res, err
	}
	archive := filepath.Join(dir, "busybox.tar")
	if err := writeBusyboxImage(archive); err != nil {
		return res, err
	}
	if out, err := exec.CommandContext(ctx, s.Sqlkube, "images", "import", "--data-dir", srv.DataDir, archive).CombinedOutput(); err != nil {
		return res, fmt.Errorf("images import: %v: %s", err, out)
	}
	if err := waitServiceAccount(ctx, cs, "default"); err != nil {
		return res, err
	}

	// Startup latency: create to Running as a watcher sees it.
	var mu sync.Mutex
	created, running := map[string]time.Time{}, map[string]time.Time{}
	done := make(chan struct{})
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := f.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		p := obj.(*corev1.Pod)
		if p.Status.Phase != corev1.PodRunning || !strings.HasPrefix(p.Name, "start-") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := running[p.Name]; !seen {
			running[p.Name] = time.Now()
			if len(running) == pods {
				close(done)
			}
		}
	}})
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	f.Start(wctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return res, ctx.Err()
	}
	start := time.Now()
	err = parallelN(ctx, pods, workers, func(ctx context.Context, i int) error {
		if rate > 0 { // pod i is created at start + i/rate
			if err := Sleep(ctx, time.Until(start.Add(time.Duration(float64(i)/rate*float64(time.Second))))); err != nil {
				return err
			}
		}
		name := fmt.Sprintf("start-%d", i)
		t := time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(ctx, sleeperPod(name), metav1.CreateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		created[name] = t
		mu.Unlock()
		return nil
	})
	if err != nil {
		return res, err
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("node bench: %d of %d pods Running after 10 minutes", len(running), pods)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.StartupWall = time.Since(start)
	mu.Lock()
	for name, t := range running {
		res.Startup = append(res.Startup, t.Sub(created[name]))
	}
	sort.Slice(res.Startup, func(i, j int) bool { return res.Startup[i] < res.Startup[j] })
	res.Phases, err = startupPhases(ctx, containerd.Socket(filepath.Join(srv.DataDir, "containerd")), created, running)
	mu.Unlock()
	if err != nil {
		return res, err
	}
	stopWatch()

	// Idle with idlePods pods running.
	if err := cleanupPods(cs); err != nil {
		return res, err
	}
	res.IdlePods = idlePods
	if err := parallelN(ctx, idlePods, workers, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Pods("default").Create(ctx, sleeperPod(fmt.Sprintf("idle-%d", i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		return res, err
	}
	if err := waitRunning(ctx, cs, idlePods); err != nil {
		return res, err
	}
	ctrPid := containerdPid(filepath.Join(srv.DataDir, "containerd"))
	if err := Sleep(ctx, warmup); err != nil {
		return res, err
	}
	samples, err := measure(ctx, window, srv.Pid(), kubeletPid(srv.DataDir), ctrPid)
	if err != nil {
		return res, err
	}
	res.Idle, res.IdleKubelet, res.IdleContainerd = samples[0], samples[1], samples[2]

	// The same server without a node.
	bare, stop, err := s.server(ctx)
	if err != nil {
		return res, err
	}
	defer stop()
	if err := Sleep(ctx, warmup); err != nil {
		return res, err
	}
	samples, err = measure(ctx, window, bare.Pid())
	if err != nil {
		return res, err
	}
	res.Bare = samples[0]
	return res, nil
}

// measure samples the CPU of each process (0: none) over window.
func measure(ctx context.Context, window time.Duration, pids ...int) ([]IdleSample, error) {
	before := make([]time.Duration, len(pids))
	for i, pid := range pids {
		if pid != 0 {
			before[i], _ = CPUTime(pid)
		}
	}
	t0 := time.Now()
	if err := Sleep(ctx, window); err != nil {
		return nil, err
	}
	out := make([]IdleSample, len(pids))
	for i, pid := range pids {
		if pid == 0 {
			continue
		}
		after, err := CPUTime(pid)
		if err != nil {
			return nil, err
		}
		rss, _ := RSS(pid)
		out[i] = IdleSample{CPU: after - before[i], Window: time.Since(t0), RSS: rss}
	}
	return out, nil
}

func sleeperPod(name string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "c", Image: NodeImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
			}},
		},
	}
}

// waitRunning waits until n pods in default are Running.
func waitRunning(ctx context.Context, cs kubernetes.Interface, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				got++
			}
		}
		if got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pods Running after 5 minutes", got, n)
		}
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// cleanupPods deletes every pod in default and waits until the kubelet has
// removed them (their containers are gone then).
func cleanupPods(cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("pods still there: %d", len(list.Items))
		}
	}
}

// kubeletPid finds the kubelet child process of the server whose data
// directory is dataDir (`sqlkube kubelet DATA_DIR/node/kubelet.json`; 0:
// none).
func kubeletPid(dataDir string) int {
	return pidWithArg(filepath.Join(dataDir, "node", "kubelet.json"))
}

// containerdPid finds the containerd started with dir's configuration (0:
// none).
func containerdPid(dir string) int { return pidWithArg(filepath.Join(dir, "config.toml")) }

// pidWithArg finds a process one of whose arguments contains arg (0: none).
func pidWithArg(arg string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), arg) {
			return pid
		}
	}
	return 0
}

func writeBusyboxImage(path string) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("the node benchmark's image is made from /bin/busybox (Debian: busybox-static): %w", err)
	}
	files := []images.File{{Path: "/bin/busybox", Data: bb, Mode: 0o755}}
	for _, a := range []string{"sh", "sleep"} {
		files = append(files, images.File{Path: "/bin/" + a, Link: "busybox"})
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := images.WriteArchive(f, images.Image{Name: NodeImage, Files: files, Env: []string{"PATH=/bin"}}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// parallelN runs fn(0 … n-1), workers at a time; the first error stops it.
func parallelN(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
