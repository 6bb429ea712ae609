package storage_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
)

const (
	// budgetRefill is how long the watch cache needs to refill the time it
	// may spend waiting for blocked watchers of its own (100 ms, at 50 ms a
	// second); rounds start with it full, as they did before the fan-out
	// ring served the watches, so that runs stay comparable.
	budgetRefill = 2 * time.Second
	// warmupEvents grows the watch cache's event history to its upper
	// bound, 102,400 events (it doubles from 100 when full while its oldest
	// event is younger than 75 s), as 75 s of writes at 700 or more a second
	// would. Each new watcher's buffer is sized from that history (capacity
	// / 75 s, between 10 and 1,000): 1,000 events once warm.
	warmupEvents = 52000
)

// BenchmarkWatchFanout measures how long an update takes to reach every
// watcher of storage.NewCached (the watch cache, with watches served by the
// fan-out ring). A round opens the watchers on all pods from the current
// revision, one of which never reads its result channel, then updates pods
// through it (GuaranteedUpdate, as kube-apiserver writes) with concurrent
// writers, and waits until every other watcher has received every update or
// been closed.
//
//   - cold: a watch cache just filled (empty event history), idle for 2 s.
//   - warm: the same after warmupEvents updates went through it with no
//     watchers, as in an apiserver under steady writes (the watch cache's
//     history at its upper bound).
//   - warm-nostall: warm, with every watcher reading (what the stalled
//     watcher costs the others).
//
// Metrics: p50/p99/max-ms from the update's hand-off to the store (taken in
// tryUpdate, just before the SQLite write, so the commit is included) to
// receipt at each reading watcher; ret-p50/ret-p99-ms from the write's
// return instead; events/s, the write rate reached; killed, reading
// watchers closed (a client would re-watch);
// delivered-%, the share of (watcher, update) pairs delivered (the
// percentiles cover only those); stalled-closed, 1 when the stalled watcher
// was terminated.
//
// Scale: SQLKUBE_BENCH_WATCHERS (default 1000, the stalled one included),
// SQLKUBE_BENCH_EVENTS (10000), SQLKUBE_BENCH_WRITERS (4).
func BenchmarkWatchFanout(b *testing.B) {
	cfg := fanoutConfig{
		watchers: envInt(b, "SQLKUBE_BENCH_WATCHERS", 1000, 2),
		events:   envInt(b, "SQLKUBE_BENCH_EVENTS", 10000, 1),
		writers:  envInt(b, "SQLKUBE_BENCH_WRITERS", 4, 1),
		stalled:  true,
	}
	scale := fmt.Sprintf("watchers=%d/events=%d/writers=%d", cfg.watchers, cfg.events, cfg.writers)
	e := newBenchEnv(b, benchPods)

	b.Run("cold/"+scale, func(b *testing.B) {
		var all fanoutResult
		for range b.N {
			b.StopTimer()
			d := e.newCacher(b)
			time.Sleep(budgetRefill)
			b.StartTimer()
			all.add(runFanout(b, e, d, cfg))
			b.StopTimer()
			d.Stop()
			b.StartTimer()
		}
		all.report(b)
	})

	d := e.newCacher(b)
	if _, err := writeUpdates(context.Background(), d, e.keys, fanoutSeq.Add(warmupEvents)-warmupEvents, warmupEvents, cfg.writers); err != nil {
		b.Fatal(err)
	}
	time.Sleep(budgetRefill)
	warm := func(cfg fanoutConfig) func(b *testing.B) {
		return func(b *testing.B) {
			var all fanoutResult
			for range b.N {
				all.add(runFanout(b, e, d, cfg))
				b.StopTimer()
				time.Sleep(budgetRefill)
				b.StartTimer()
			}
			all.report(b)
		}
	}
	b.Run("warm/"+scale, warm(cfg))
	// The same without the stalled watcher (all watchers read): what the
	// stall costs the others.
	nostall := cfg
	nostall.stalled = false
	b.Run("warm-nostall/"+scale, warm(nostall))
}

// TestCacher_StalledWatcher checks what storage.NewCached promises when a
// watcher never reads: every other watcher receives every event, in order,
// none is cut off, and the stalled one is terminated once it falls its
// buffer (100 events here) behind - with a 429 Status to resume from after
// an in-order prefix without gaps, then a closed channel.
func TestCacher_StalledWatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a watch cache over 1,000 pods")
	}
	const watchers, events = 20, 500
	e := newBenchEnv(t, 1000)
	d := newPodCacher(t, e.store, 100)
	// One writer, so that event order is write order and prefixes and gaps
	// can be checked.
	r := runFanout(t, e, d, fanoutConfig{watchers: watchers, events: events, writers: 1, stalled: true, checkOrder: true})
	if r.killed != 0 {
		t.Errorf("%d reading watchers were closed, want 0", r.killed)
	}
	if got, want := len(r.latencies), (watchers-1)*events; got != want {
		t.Errorf("reading watchers received %d events in all, want %d", got, want)
	}
	if r.stalledClosed != 1 {
		t.Errorf("the stalled watcher was not closed (%d events buffered)", r.stalledReceived)
	}
	if r.stalledReceived >= events {
		t.Errorf("the stalled watcher buffered all %d events; it should have been closed after a few", r.stalledReceived)
	}
}

type fanoutConfig struct {
	// watchers includes the stalled one, if any.
	watchers, events, writers int
	// stalled makes watcher 0 never read.
	stalled bool
	// checkOrder fails unless each watcher's events come in write order;
	// only meaningful with one writer.
	checkOrder bool
}

type fanoutResult struct {
	// latencies and afterReturn are per delivery to a reading watcher.
	latencies, afterReturn []time.Duration
	rounds, events         int
	// pairs is how many (reading watcher, update) deliveries were due.
	pairs           int
	writeTime       time.Duration
	killed          int
	stalledClosed   int
	stalledReceived int
}

func (r *fanoutResult) add(o fanoutResult) {
	r.latencies = append(r.latencies, o.latencies...)
	r.afterReturn = append(r.afterReturn, o.afterReturn...)
	r.rounds++
	r.events += o.events
	r.pairs += o.pairs
	r.writeTime += o.writeTime
	r.killed += o.killed
	r.stalledClosed += o.stalledClosed
	r.stalledReceived += o.stalledReceived
}

func (r *fanoutResult) report(b *testing.B) {
	b.ReportMetric(ms(percentile(r.latencies, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(r.latencies, 0.99)), "p99-ms")
	b.ReportMetric(ms(percentile(r.latencies, 1)), "max-ms")
	b.ReportMetric(ms(percentile(r.afterReturn, 0.50)), "ret-p50-ms")
	b.ReportMetric(ms(percentile(r.afterReturn, 0.99)), "ret-p99-ms")
	b.ReportMetric(float64(r.events)/r.writeTime.Seconds(), "events/s")
	b.ReportMetric(float64(r.killed)/float64(r.rounds), "killed")
	b.ReportMetric(100*float64(len(r.latencies))/float64(r.pairs), "delivered-%")
	b.ReportMetric(float64(r.stalledClosed)/float64(r.rounds), "stalled-closed")
}

// fanoutSeq numbers updates across rounds, so a round never mistakes an
// earlier round's event for its own.
var fanoutSeq atomic.Int64

// runFanout runs one round of the fan-out benchmark; watcher 0 is the
// stalled one if cfg.stalled.
func runFanout(tb testing.TB, e *benchEnv, s k8sstorage.Interface, cfg fanoutConfig) fanoutResult {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rv, err := e.store.GetCurrentResourceVersion(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	watchers := make([]watch.Interface, cfg.watchers)
	for i := range watchers {
		w, err := s.Watch(ctx, podsPrefix, k8sstorage.ListOptions{
			ResourceVersion: strconv.FormatUint(rv, 10),
			Predicate:       podPredicate(labels.Everything(), fields.Everything()),
			Recursive:       true,
		})
		if err != nil {
			tb.Fatal(err)
		}
		defer w.Stop()
		watchers[i] = w
	}

	// received[w][i] is when watcher w received update i (unix ns).
	base := fanoutSeq.Add(int64(cfg.events)) - int64(cfg.events)
	received := make([][]int64, cfg.watchers)
	var (
		readers  sync.WaitGroup
		killed   atomic.Int64
		problems = make(chan string, cfg.watchers)
	)
	first := 0
	if cfg.stalled {
		first = 1
	}
	for w := first; w < cfg.watchers; w++ {
		received[w] = make([]int64, cfg.events)
		readers.Add(1)
		go func() {
			defer readers.Done()
			got, last := 0, int64(-1)
			for ev := range watchers[w].ResultChan() {
				now := time.Now().UnixNano()
				if isResumeError(ev) {
					break // terminated as too slow; a client would watch again
				}
				i, err := eventSeq(ev, base, cfg.events)
				if err != nil {
					problems <- err.Error()
					return
				}
				if received[w][i] != 0 || (cfg.checkOrder && i != last+1) {
					problems <- fmt.Sprintf("watcher %d: update %d after %d", w, i, last)
					return
				}
				received[w][i], last = now, i
				if got++; got == cfg.events {
					return
				}
			}
			killed.Add(1)
		}()
	}

	times, err := writeUpdates(ctx, s, e.keys, base, cfg.events, cfg.writers)
	if err != nil {
		tb.Fatal(err)
	}
	if !waitTimeout(&readers, 5*time.Minute) {
		tb.Fatal("reading watchers neither received every update nor were closed within 5 minutes")
	}
	select {
	case p := <-problems:
		tb.Fatal(p)
	default:
	}

	r := fanoutResult{events: cfg.events, pairs: (cfg.watchers - first) * cfg.events, writeTime: times.took, killed: int(killed.Load())}
	if cfg.stalled {
		r.stalledClosed, r.stalledReceived = drainStalled(tb, watchers[0], base, cfg)
	}
	r.latencies = make([]time.Duration, 0, r.pairs)
	r.afterReturn = make([]time.Duration, 0, r.pairs)
	for w := first; w < cfg.watchers; w++ {
		for i, at := range received[w] {
			if at == 0 {
				continue // never delivered: the watcher was closed
			}
			r.latencies = append(r.latencies, time.Duration(at-times.sent[i]))
			r.afterReturn = append(r.afterReturn, time.Duration(max(0, at-times.returned[i])))
		}
	}
	return r
}

// drainStalled reads what the stalled watcher had buffered and reports
// whether its channel was closed after that (the cache terminated it) and
// how many updates it held. Every update has been dispatched by the time it
// is called, so a watcher not terminated by then never will be.
func drainStalled(tb testing.TB, w watch.Interface, base int64, cfg fanoutConfig) (closed, received int) {
	tb.Helper()
	last, resumable := int64(-1), false
	drain := time.After(time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				if !resumable {
					tb.Fatal("stalled watcher closed without a 429 Status to resume from")
				}
				return 1, received
			}
			if isResumeError(ev) {
				resumable = true
				continue
			}
			i, err := eventSeq(ev, base, cfg.events)
			if err != nil {
				tb.Fatal(err)
			}
			if cfg.checkOrder && i != last+1 {
				tb.Fatalf("stalled watcher: update %d after %d", i, last)
			}
			last = i
			received++
		case <-drain:
			return 0, received
		}
	}
}

// writeTimes are when each update of a round was handed to the store and
// when its write returned (unix ns), and how long all writes took.
type writeTimes struct {
	sent, returned []int64
	took           time.Duration
}

// writeUpdates updates pods keys[i % len(keys)] for i in [0, n) with the
// given number of concurrent writers, setting the seqAnnotation to base+i.
func writeUpdates(ctx context.Context, s k8sstorage.Interface, keys []string, base int64, n, writers int) (writeTimes, error) {
	t := writeTimes{sent: make([]int64, n), returned: make([]int64, n)}
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errs  = make(chan error, writers)
		start = time.Now()
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				err := s.GuaranteedUpdate(ctx, keys[int(i)%len(keys)], &v1.Pod{}, false, nil,
					func(in k8sruntime.Object, _ k8sstorage.ResponseMeta) (k8sruntime.Object, *uint64, error) {
						pod := in.(*v1.Pod).DeepCopy()
						pod.Annotations[seqAnnotation] = strconv.FormatInt(base+i, 10)
						t.sent[i] = time.Now().UnixNano()
						return pod, nil, nil
					}, nil)
				t.returned[i] = time.Now().UnixNano()
				if err != nil {
					errs <- fmt.Errorf("update %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.took = time.Since(start)
	select {
	case err := <-errs:
		return t, err
	default:
		return t, nil
	}
}

// isResumeError reports whether ev is the 429 Status a decoupled watch ends
// with when its consumer falls too far behind.
func isResumeError(ev watch.Event) bool {
	status, ok := ev.Object.(*metav1.Status)
	return ev.Type == watch.Error && ok && status.Code == http.StatusTooManyRequests
}

// eventSeq returns the index in its round of the update ev carries.
func eventSeq(ev watch.Event, base int64, events int) (int64, error) {
	if ev.Type != watch.Modified {
		return 0, fmt.Errorf("unexpected %s event: %v", ev.Type, ev.Object)
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return 0, err
	}
	seq, err := strconv.ParseInt(m.GetAnnotations()[seqAnnotation], 10, 64)
	if err != nil || seq < base || seq >= base+int64(events) {
		return 0, fmt.Errorf("event of %s/%s is not one of this round's updates (%q)", m.GetNamespace(), m.GetName(), m.GetAnnotations()[seqAnnotation])
	}
	return seq - base, nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
