package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The functions of this file measure an API server that something else
// started (sqlkube server, or a peer such as k3s), through its admin
// kubeconfig and its process id.

// Started is when process pid started: its start time in /proc/PID/stat
// against /proc/uptime, both counted from boot (10 ms resolution).
func Started(pid int) (time.Time, error) {
	now := time.Now()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("cluster: /proc/%d/stat: no command name", pid)
	}
	// Fields after the command name start at state (3); starttime is 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return time.Time{}, fmt.Errorf("cluster: /proc/%d/stat: %d fields", pid, len(f))
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	u, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, err
	}
	up, err := strconv.ParseFloat(strings.Fields(string(u))[0], 64)
	if err != nil {
		return time.Time{}, err
	}
	age := time.Duration(up*float64(time.Second)) - time.Duration(ticks)*time.Second/clockTicks
	return now.Add(-age), nil
}

// WaitReady waits until kubeconfig exists and its server answers /readyz
// with ok and namespace default has its default ServiceAccount (the first
// moment a user's pod can be created), polling every 20 ms. It returns
// the kubeconfig's client configuration without a client-side rate limit.
func WaitReady(ctx context.Context, kubeconfig string) (*rest.Config, error) {
	var (
		cs      kubernetes.Interface
		cfg     *rest.Config
		lastErr error
	)
	for {
		if cs == nil {
			if cfg, lastErr = clientcmd.BuildConfigFromFlags("", kubeconfig); lastErr == nil {
				cfg.QPS, cfg.Burst = -1, 0
				cs, lastErr = kubernetes.NewForConfig(cfg)
			}
		}
		if cs != nil {
			var body []byte
			body, lastErr = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if lastErr == nil && strings.TrimSpace(string(body)) != "ok" {
				lastErr = fmt.Errorf("/readyz: %q", body)
			}
			if lastErr == nil {
				if _, lastErr = cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); lastErr == nil {
					return cfg, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: waiting for %s's server to be ready: %w (last: %v)", kubeconfig, ctx.Err(), lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// BurstResult is one run of CreateBurst.
type BurstResult struct {
	Pods    int
	Elapsed time.Duration
	// P50 and P99 are of the creates' latencies.
	P50, P99 time.Duration
}

// PerSecond is the creates per second over the whole burst.
func (r BurstResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Pods) / r.Elapsed.Seconds()
}

// burstScheduler is the scheduler name of CreateBurst's pods: no
// scheduler takes them, so the burst measures the API alone.
const burstScheduler = "sqlkube-bench-none"

// CreateBurst creates namespace ns and waits for its default
// ServiceAccount (the service account admission needs it), then creates n
// pods in it from workers goroutines at once over cfg, as fast as the
// server answers, and times them. No scheduler or node takes the pods.
// Afterwards they are deleted, and it waits until none is left.
func CreateBurst(ctx context.Context, cfg *rest.Config, ns string, n, workers int) (BurstResult, error) {
	r := BurstResult{Pods: n}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return r, err
	}
	if err := waitServiceAccount(ctx, cs, ns); err != nil {
		return r, err
	}
	lat := make([]time.Duration, n)
	var mu sync.Mutex
	start := time.Now()
	err = parallelN(ctx, n, workers, func(ctx context.Context, i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%05d", i), Labels: map[string]string{"app": "burst"}},
			Spec: corev1.PodSpec{
				SchedulerName:                burstScheduler,
				AutomountServiceAccountToken: ptr(false),
				Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/app:1.0",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
					}},
				}},
			},
		}
		t0 := time.Now()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		lat[i] = time.Since(t0)
		mu.Unlock()
		return nil
	})
	r.Elapsed = time.Since(start)
	if err != nil {
		return r, fmt.Errorf("cluster: pod burst: %w", err)
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	r.P50, r.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=burst"}); err != nil {
		return r, err
	}
	for {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil && len(list.Items) == 0 {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, errors.Join(fmt.Errorf("cluster: waiting for the burst's pods to go: %w", ctx.Err()), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
