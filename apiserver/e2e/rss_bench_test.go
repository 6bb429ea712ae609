package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// rssMiB reads a process's resident set size in MiB.
func rssMiB(tb testing.TB, pid int) float64 {
	tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Skipf("no /proc to read memory from: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb / 1024
		}
	}
	tb.Fatal("no VmRSS in /proc status")
	return 0
}

// BenchmarkServerMemory reports the resident memory of `sqlkube server`:
// idle right after it serves (empty SQLite), then loaded with 10,000 pods
// created through the API (20 clients) and listed once.
func BenchmarkServerMemory(b *testing.B) {
	for range b.N {
		s := startCommand(b, b.TempDir(), "server")
		pid := s.cmd.Process.Pid
		idle := rssMiB(b, pid)

		cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
		if err != nil {
			b.Fatal(err)
		}
		cfg.QPS, cfg.Burst = -1, 0
		cs := kubernetes.NewForConfigOrDie(cfg)
		const pods, clients = 10000, 20
		var (
			next  atomic.Int64
			wg    sync.WaitGroup
			first atomic.Value
		)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= pods; i = next.Add(1) {
					pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i)},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.0"}}}}
					if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
						first.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, ok := first.Load().(error); ok {
			b.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
		loaded := rssMiB(b, pid)
		s.stop(b)
		b.ReportMetric(idle, "idle-RSS-MiB")
		b.ReportMetric(loaded, "10k-pods-RSS-MiB")
	}
}
