package storage_test

// Storage-layer benchmarks: lists of 10,000 pods from the etcd3 store and
// from the watch cache and the memory a cached pod costs (this file), watch
// fan-out with a stalled watcher (bench_fanout_test.go), over the pod
// fixture of bench_pods_test.go. All run on SQLite in a temp dir over the
// in-process etcd client. Results and the commands that reproduce them:
// docs/benchmarks.md.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/endpoints/request"
	k8sstorage "k8s.io/apiserver/pkg/storage"
)

// benchPods is how many pods the benchmarks store and cache.
const benchPods = 10000

// BenchmarkGetList lists all pods, one namespace's and one node's, from the
// store (a consistent read from SQLite) and through the cache delegator
// kube-apiserver puts in front of the store: resourceVersion "0" (served
// from the watch cache as it is) and "" (a consistent read, served from the
// watch cache once it has caught up with the store's current revision).
func BenchmarkGetList(b *testing.B) {
	e := newBenchEnv(b, benchPods)
	delegator := e.newCacher(b)

	ns := podNamespace(7)
	nsCtx := request.WithRequestInfo(request.WithNamespace(context.Background(), ns),
		&request.RequestInfo{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Namespace: ns, Resource: "pods"})
	lists := []struct {
		name  string
		ctx   context.Context
		key   string
		field fields.Selector
		want  int
	}{
		{"all", context.Background(), podsPrefix, fields.Everything(), benchPods},
		// As kube-apiserver lists /api/v1/namespaces/ns-07/pods: the key
		// names the namespace, the request info lets the cache use its
		// namespace index.
		{"namespace", nsCtx, podsPrefix + "/" + ns, fields.Everything(), benchPods / benchNamespaces},
		{"nodeName", context.Background(), podsPrefix, fields.OneTermEqualSelector("spec.nodeName", podNode(7)), benchPods / benchNodes},
	}
	sources := []struct {
		name string
		s    k8sstorage.Interface
		rv   string
	}{
		{"store", e.store, ""},
		{"cacher", delegator, "0"},
		{"cacher-consistent", delegator, ""},
	}
	for _, src := range sources {
		for _, l := range lists {
			b.Run(src.name+"/"+l.name, func(b *testing.B) {
				opts := k8sstorage.ListOptions{
					ResourceVersion: src.rv,
					Predicate:       podPredicate(labels.Everything(), l.field),
					Recursive:       true,
				}
				durations := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					list := &v1.PodList{}
					start := time.Now()
					if err := src.s.GetList(l.ctx, l.key, opts, list); err != nil {
						b.Fatal(err)
					}
					durations = append(durations, time.Since(start))
					if len(list.Items) != l.want {
						b.Fatalf("listed %d pods, want %d", len(list.Items), l.want)
					}
				}
				b.StopTimer()
				b.ReportMetric(ms(percentile(durations, 0.50)), "p50-ms")
				b.ReportMetric(ms(percentile(durations, 0.99)), "p99-ms")
			})
		}
	}
}

// BenchmarkCachedPodMemory builds a watch cache over 10,000 stored pods and
// reports the live heap it adds per pod (after GC, with the cache ready),
// next to the pod's stored (protobuf) size. ns/op is the time to fill the
// cache: list from the store, decode, index.
//
// Each cache gets a store of its own: a store keeps a reference to the
// last cache built on it (its stats call the cache's key lister), so a
// stopped cache would otherwise stay live until the next one replaced it.
func BenchmarkCachedPodMemory(b *testing.B) {
	e := newBenchEnv(b, benchPods)
	b.Run(fmt.Sprintf("pods=%d", benchPods), func(b *testing.B) {
		perPod := make([]int64, 0, b.N)
		for range b.N {
			b.StopTimer()
			store, closeStore := e.newStore(b)
			before := liveHeap()
			b.StartTimer()
			c := newPodCacher(b, store, 0)
			b.StopTimer()
			after := liveHeap()
			perPod = append(perPod, (after-before)/benchPods)
			c.Stop()
			closeStore()
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(float64(percentile(perPod, 0.5)), "heap-B/pod")
		b.ReportMetric(float64(e.encodedBytes)/benchPods, "stored-B/pod")
	})
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// percentile returns the q-quantile (nearest rank) of xs; it sorts xs.
func percentile[T cmp.Ordered](xs []T, q float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	slices.Sort(xs)
	rank := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(rank, len(xs)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// envInt reads a scale setting: an integer at least least, def if unset.
func envInt(tb testing.TB, name string, def, least int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		tb.Fatalf("%s=%q: want an integer >= %d", name, v, least)
	}
	return n
}
