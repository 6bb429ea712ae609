package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// benchClient is a clientset without client-side rate limits.
func benchClient(b *testing.B, cfg *rest.Config) *kubernetes.Clientset {
	b.Helper()
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	return kubernetes.NewForConfigOrDie(c)
}

func benchPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%06d", i), Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%50)}},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("node-%d", i%100),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.0", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
		},
	}
}

// createPods creates pods [from, from+n) with the given number of
// concurrent clients and returns how long it took.
func createPods(b *testing.B, cs *kubernetes.Clientset, from, n, clients int) time.Duration {
	b.Helper()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Value
	)
	next.Store(int64(from))
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= from+n {
					return
				}
				if _, err := cs.CoreV1().Pods("default").Create(context.Background(), benchPod(i), metav1.CreateOptions{}); err != nil {
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
	return time.Since(start)
}

// BenchmarkServer_PodCreates: pod creates per second through the REST API
// (JSON, client-go) with 20 concurrent clients, on embedded SQLite.
func BenchmarkServer_PodCreates(b *testing.B) {
	cs := benchClient(b, newServer(b))
	const clients = 20
	b.ResetTimer()
	took := createPods(b, cs, 0, b.N, clients)
	b.ReportMetric(float64(b.N)/took.Seconds(), "creates/s")
}

// BenchmarkServer_ListPods: GET of one pod and LIST of 10,000 pods as JSON
// (resourceVersion unset: a consistent list, from the watch cache), with
// p50/p99 of each.
func BenchmarkServer_ListPods(b *testing.B) {
	cfg := newServer(b)
	cs := benchClient(b, cfg)
	const pods = 10000
	createPods(b, cs, 0, pods, 20)
	get := func(url string) time.Duration {
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n == 0 {
			b.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
		return time.Since(start)
	}
	for _, c := range []struct{ name, url string }{
		{"get", cfg.Host + "/api/v1/namespaces/default/pods/pod-000042"},
		{"list-10000", cfg.Host + "/api/v1/namespaces/default/pods"},
	} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				lat = append(lat, get(c.url))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
		})
	}
}
