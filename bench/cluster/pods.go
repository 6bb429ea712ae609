package cluster

import (
	"context"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodCounter follows the pods of a namespace with an informer and counts
// those that exist, are bound to a node and are Running.
type PodCounter struct {
	mu                     sync.Mutex
	pods                   map[string]*corev1.Pod
	exists, bound, running int
	changed                chan struct{}
}

// WatchPods starts a PodCounter on namespace ns until ctx ends and waits
// for its first list.
func WatchPods(ctx context.Context, cs kubernetes.Interface, ns string) (*PodCounter, error) {
	c := &PodCounter{pods: map[string]*corev1.Pod{}, changed: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.set(obj) },
		UpdateFunc: func(_, obj any) { c.set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				c.update(p.Namespace+"/"+p.Name, nil)
			}
		},
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, ctx.Err()
	}
	return c, nil
}

func (c *PodCounter) set(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		c.update(p.Namespace+"/"+p.Name, p)
	}
}

func (c *PodCounter) update(key string, p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(c.pods[key], -1)
	if p == nil {
		delete(c.pods, key)
	} else {
		c.pods[key] = p
	}
	c.add(p, 1)
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *PodCounter) add(p *corev1.Pod, d int) {
	if p == nil {
		return
	}
	c.exists += d
	if p.Spec.NodeName != "" {
		c.bound += d
	}
	if p.Status.Phase == corev1.PodRunning {
		c.running += d
	}
}

// Counts returns how many pods exist, are bound and are Running.
func (c *PodCounter) Counts() (exists, bound, running int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exists, c.bound, c.running
}

// Wait blocks until cond holds for the counts or ctx ends.
func (c *PodCounter) Wait(ctx context.Context, cond func(exists, bound, running int) bool) error {
	for {
		c.mu.Lock()
		ok, ch := cond(c.exists, c.bound, c.running), c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Throughput is the rate at which a count grew, sampled every second.
type Throughput struct {
	// Total is how long the count took to reach its target from the start.
	Total time.Duration
	// First and Last are when the count first grew and reached the target.
	First, Last time.Duration
	// Average is the count over Last-First per second.
	Average float64
	// P50, P90, P99 are percentiles of the per-second increments between
	// First and Last (as scheduler_perf's SchedulingThroughput).
	P50, P90, P99 float64
}

// SampleBound samples the bound count every second from start until it
// reaches want or ctx ends (then the throughput is of what was bound).
func (c *PodCounter) SampleBound(ctx context.Context, start time.Time, want int) (Throughput, int) {
	var (
		t       Throughput
		samples []float64
		last    int
	)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	done := make(chan struct{})
	go func() {
		_ = c.Wait(ctx, func(_, bound, _ int) bool {
			if bound > 0 && t.First == 0 {
				t.First = time.Since(start)
			}
			return bound >= want
		})
		close(done)
	}()
	finish := func() (Throughput, int) {
		_, bound, _ := c.Counts()
		t.Last = time.Since(start)
		t.Total = t.Last
		if bound > 0 && t.Last > t.First {
			t.Average = float64(bound) / (t.Last - t.First).Seconds()
		}
		sort.Float64s(samples)
		t.P50, t.P90, t.P99 = percentile(samples, 0.50), percentile(samples, 0.90), percentile(samples, 0.99)
		return t, bound
	}
	for {
		select {
		case <-done:
			return finish()
		case <-tick.C:
			_, bound, _ := c.Counts()
			if bound > 0 && (last > 0 || bound > last) {
				samples = append(samples, float64(bound-last))
			}
			last = bound
		}
	}
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
