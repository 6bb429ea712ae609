package storage

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
)

// DefaultWatchBuffer is how many events the fan-out ring holds, and so how
// far a watcher may fall behind before it is terminated.
const DefaultWatchBuffer = 4096

var (
	watchersGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sqlkube", Subsystem: "storage", Name: "watchers",
		Help: "Watches served by the fan-out ring, by resource.",
	}, []string{"resource"})
	watchersTerminated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sqlkube", Subsystem: "storage", Name: "watchers_terminated_total",
		Help: "Watches terminated because their consumer fell a whole ring behind, by resource.",
	}, []string{"resource"})
	eventsDispatched = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sqlkube", Subsystem: "storage", Name: "watch_events_dispatched_total",
		Help: "Watch events handed to consumers by the fan-out ring, by resource.",
	}, []string{"resource"})
	watchesDelegated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sqlkube", Subsystem: "storage", Name: "watches_delegated_total",
		Help: "Watches passed to the watch cache because the ring could not serve them (not ready, resourceVersion older than the ring or newer than the store), by resource.",
	}, []string{"resource"})
)

// FanoutOptions configure a Fanout.
type FanoutOptions struct {
	// Source is the resource's watch cache (its delegator): the fan-out
	// lists from it and passes to it the watches it cannot serve.
	Source k8sstorage.Interface
	// Store is the store under the watch cache; the fan-out follows it
	// with one watch of its own, so that nothing the watch cache does (its
	// dispatcher waiting on one of its own watchers, cutting off a
	// watcher it finds slow) can hold up or end the ring.
	Store k8sstorage.Interface
	// ResourcePrefix is the key prefix of the resource (as in Options).
	ResourcePrefix string
	// Resource names the resource in metrics.
	Resource string
	KeyFunc  func(runtime.Object) (string, error)
	GetAttrs func(runtime.Object) (labels.Set, fields.Set, error)
	NewFunc  func() runtime.Object
	// NewListFunc makes the list the fan-out fills its state from.
	NewListFunc func() runtime.Object
	// Buffer is the ring's size in events (default DefaultWatchBuffer).
	Buffer int
	// BookmarkEvery is how often a watcher that asked for bookmarks gets
	// one (default one minute; also 2 s before its context's deadline, as
	// the watch cache does).
	BookmarkEvery time.Duration
	// SourceReady reports whether Source serves watches (the watch cache
	// has filled). A watch the fan-out passes on waits for it, up to
	// StartWait: a watch cache that is not ready answers 429 "storage is
	// (re)initializing", and client-go's reflectors then wait a second or
	// more before they watch again, so a control plane's informers that
	// start with it would take that long to sync. Nil: not waited for.
	SourceReady func() bool
	// StartWait bounds how long a watch waits for the ring, or for
	// SourceReady, to serve it (default 3 s); after that it is passed on
	// as it is.
	StartWait time.Duration
}

// Fanout serves a resource's watches from one shared ring of events, so
// that no watcher can hold up another or the store.
//
// The watch cache's own dispatcher hands each event to every watcher's
// channel in turn and, when one is full, waits for it (up to 100 ms) before
// cutting it off - every other watcher waits too. The fan-out instead
// follows the store with a single watch that only appends to a ring;
// each watcher has its own goroutine and cursor into the ring and filters
// and delivers at its consumer's pace. A consumer that falls a whole ring
// behind gets a 429 Status (client-go's reflector watches again from the
// last resourceVersion it received, so nothing is lost) and its channel is
// closed. Dispatch costs one append and one broadcast however many
// watchers there are.
//
// Watches the ring cannot serve - before it has filled, from a
// resourceVersion older than the ring, or newer than the store - are passed
// to the watch cache unchanged (it serves its longer history, or answers
// 410 Gone / too large resourceVersion).
type Fanout struct {
	o      FanoutOptions
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards everything below. Lock order: mu only; watchers never hold
	// it while sending.
	mu sync.RWMutex
	// ring[seq % len(ring)] holds event seq for seq in [first, next).
	ring        []*ringEntry
	first, next uint64
	// floor: every event with a resourceVersion above floor is in the ring
	// or still to come. head: every event at or below head is in the ring.
	floor, head uint64
	ready       bool
	// gen changes when the ring is rebuilt; watchers of an older gen end.
	gen    uint64
	notify chan struct{} // closed and replaced when next or head moves
	// last is the latest state of every object, for selector transitions.
	last map[string]objectState
}

type objectState struct {
	obj    runtime.Object
	labels labels.Set
	fields fields.Set
}

type ringEntry struct {
	typ  watch.EventType
	key  string
	rv   uint64
	cur  objectState // for Deleted, the state deleted (at the delete's rv)
	prev *objectState
}

// NewFanout starts following o.Store; Stop it when done.
func NewFanout(o FanoutOptions) *Fanout {
	registerMetrics()
	if o.Buffer <= 0 {
		o.Buffer = DefaultWatchBuffer
	}
	if o.BookmarkEvery <= 0 {
		o.BookmarkEvery = time.Minute
	}
	if o.StartWait <= 0 {
		o.StartWait = 3 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fanout{o: o, cancel: cancel, done: make(chan struct{}), ring: make([]*ringEntry, min(initialRing, o.Buffer)), notify: make(chan struct{})}
	go f.follow(ctx)
	return f
}

// Stop ends the fan-out and every watch it serves.
func (f *Fanout) Stop() {
	f.cancel()
	<-f.done
	f.mu.Lock()
	f.ready = false
	f.gen++
	f.broadcastLocked()
	f.mu.Unlock()
}

// Ready reports whether the ring serves watches.
func (f *Fanout) Ready() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.ready
}

func (f *Fanout) broadcastLocked() {
	close(f.notify)
	f.notify = make(chan struct{})
}

// follow keeps the ring fed from the store. When the store's watch ends
// (410 Gone after a compaction, say) the ring is rebuilt from a new list
// and its watchers end: they watch again from what they received, from the
// new ring or the watch cache, which answers 410 Gone if that is too old.
func (f *Fanout) follow(ctx context.Context) {
	defer close(f.done)
	for ctx.Err() == nil {
		err := f.build(ctx)
		if err == nil {
			err = f.stream(ctx)
		}
		f.mu.Lock()
		f.ready = false
		f.gen++
		f.broadcastLocked()
		f.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Typically the cache is not ready; retry soon.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// build fills the ring's state from a list of the source and empties the
// ring, which then serves watches from the list's resourceVersion on.
func (f *Fanout) build(ctx context.Context) error {
	list := f.o.NewListFunc()
	if err := f.o.Source.GetList(ctx, f.prefix(), k8sstorage.ListOptions{Recursive: true, Predicate: k8sstorage.Everything}, list); err != nil {
		return err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	listRV, err := k8sstorage.APIObjectVersioner{}.ParseResourceVersion(lm.GetResourceVersion())
	if err != nil {
		return err
	}
	last := map[string]objectState{}
	if err := meta.EachListItem(list, func(obj runtime.Object) error {
		key, st, err := f.state(obj)
		if err == nil {
			last[key] = st
		}
		return err
	}); err != nil {
		return err
	}
	f.mu.Lock()
	f.first, f.next = 0, 0
	clear(f.ring)
	f.floor, f.head = listRV, listRV
	f.last = last
	f.ready = true
	f.broadcastLocked()
	f.mu.Unlock()
	return nil
}

func (f *Fanout) prefix() string { return strings.TrimSuffix(f.o.ResourcePrefix, "/") + "/" }

// stream watches the store from the ring's head and appends what it sends,
// a batch at a time, until the watch ends or fails.
func (f *Fanout) stream(ctx context.Context) error {
	f.mu.RLock()
	from := f.head
	f.mu.RUnlock()
	pred := k8sstorage.Everything
	pred.AllowWatchBookmarks = true
	w, err := f.o.Store.Watch(ctx, f.prefix(), k8sstorage.ListOptions{ResourceVersion: strconv.FormatUint(from, 10), Recursive: true, Predicate: pred})
	if err != nil {
		return err
	}
	defer w.Stop()
	batch := make([]watch.Event, 0, 256)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			// Take what else is already waiting, so that watchers are
			// woken once per batch rather than once per event.
			batch = append(batch[:0], ev)
		more:
			for len(batch) < cap(batch) {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						break more
					}
					batch = append(batch, ev)
				default:
					break more
				}
			}
			if err := f.apply(batch); err != nil {
				return err
			}
		}
	}
}

// state returns an object's key and its selectable attributes. Objects
// from the watch cache's watches may be wrapped for serialization caching;
// the attributes are read from a copy of what they wrap.
func (f *Fanout) state(obj runtime.Object) (string, objectState, error) {
	plain := obj
	if c, ok := obj.(runtime.CacheableObject); ok {
		plain = c.GetObject()
	}
	key, err := f.o.KeyFunc(plain)
	if err != nil {
		return "", objectState{}, err
	}
	l, fl, err := f.o.GetAttrs(plain)
	if err != nil {
		return "", objectState{}, err
	}
	return key, objectState{obj: obj, labels: l, fields: fl}, nil
}

// apply appends a batch of the source's events to the ring and wakes the
// watchers once.
func (f *Fanout) apply(batch []watch.Event) error {
	entries := make([]*ringEntry, 0, len(batch))
	var bookmark uint64
	for _, ev := range batch {
		if ev.Type == watch.Error {
			return fmt.Errorf("watch of %s ended: %v", f.o.Resource, ev.Object)
		}
		acc, err := meta.Accessor(ev.Object)
		if err != nil {
			return err
		}
		rv, err := k8sstorage.APIObjectVersioner{}.ParseResourceVersion(acc.GetResourceVersion())
		if err != nil {
			return err
		}
		if ev.Type == watch.Bookmark {
			bookmark = max(bookmark, rv)
			continue
		}
		key, st, err := f.state(ev.Object)
		if err != nil {
			return err
		}
		entries = append(entries, &ringEntry{typ: ev.Type, key: key, rv: rv, cur: st})
	}

	f.mu.Lock()
	for _, e := range entries {
		if prev, ok := f.last[e.key]; ok {
			e.prev = &prev
		}
		if e.typ == watch.Deleted {
			delete(f.last, e.key)
		} else {
			f.last[e.key] = e.cur
		}
		if f.next-f.first == uint64(len(f.ring)) && len(f.ring) < f.o.Buffer {
			f.growLocked()
		}
		if f.next-f.first == uint64(len(f.ring)) {
			f.floor = f.ring[f.first%uint64(len(f.ring))].rv
			f.ring[f.first%uint64(len(f.ring))] = nil
			f.first++
		}
		f.ring[f.next%uint64(len(f.ring))] = e
		f.next++
		f.head = max(f.head, e.rv)
	}
	f.head = max(f.head, bookmark)
	// Swap the notification channel under the lock, close the old one
	// after it: waking a thousand watchers must not hold them up.
	woken := f.notify
	f.notify = make(chan struct{})
	f.mu.Unlock()
	close(woken)
	return nil
}

// initialRing is the ring's first size: it doubles as events come, up to
// Buffer. Most of a cluster's resources see few events (a host's
// hundred idle tenants have some 60 resources each), and a ring of
// Buffer pointers for each would hold 32 KiB that stays empty.
const initialRing = 64

// growLocked doubles the ring (up to Buffer), keeping each event at its
// sequence number's place in the new one.
func (f *Fanout) growLocked() {
	ring := make([]*ringEntry, min(2*len(f.ring), f.o.Buffer))
	for seq := f.first; seq < f.next; seq++ {
		ring[seq%uint64(len(ring))] = f.ring[seq%uint64(len(f.ring))]
	}
	f.ring = ring
}

// Watch serves a watch from the ring, or passes it to the source when the
// ring cannot serve it. Initial events (resourceVersion "0", or
// sendInitialEvents) come from a list of the source, then the ring
// continues from that list's resourceVersion.
func (f *Fanout) Watch(ctx context.Context, key string, opts k8sstorage.ListOptions) (watch.Interface, error) {
	rv, err := k8sstorage.APIObjectVersioner{}.ParseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	if !f.Ready() && !f.awaitReady(ctx) {
		return f.delegate(ctx, key, opts)
	}
	// As the watch cache: a watch from "" (the latest state) or "0" (any
	// state) without sendInitialEvents starts with that state as Added
	// events, as does one with sendInitialEvents=true.
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents ||
		opts.SendInitialEvents == nil && (opts.ResourceVersion == "" || opts.ResourceVersion == "0")
	var initialObjs []runtime.Object
	if initial {
		list := f.o.NewListFunc()
		lopts := opts
		lopts.SendInitialEvents = nil
		lopts.Predicate.Limit, lopts.Predicate.Continue = 0, ""
		lopts.Predicate.AllowWatchBookmarks = false
		switch lopts.ResourceVersion {
		case "":
			lopts.ResourceVersionMatch = ""
		case "0":
			// "Any" state would do, but the watch cache may lag the ring,
			// which follows the store: start from the store's current
			// revision, as fresh as a watch from "" (kube-apiserver's
			// watch cache is as likely to be current when it answers).
			cur, err := f.o.Source.GetCurrentResourceVersion(ctx)
			if err != nil {
				return nil, err
			}
			lopts.ResourceVersion = strconv.FormatUint(cur, 10)
			lopts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		default:
			lopts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
		if err := f.o.Source.GetList(ctx, key, lopts, list); err != nil {
			return nil, err
		}
		if initialObjs, err = meta.ExtractList(list); err != nil {
			return nil, err
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return nil, err
		}
		if rv, err = (k8sstorage.APIObjectVersioner{}).ParseResourceVersion(lm.GetResourceVersion()); err != nil {
			return nil, err
		}
	} else if opts.ResourceVersion == "" {
		// sendInitialEvents=false: from now, the store's current revision.
		if rv, err = f.o.Source.GetCurrentResourceVersion(ctx); err != nil {
			return nil, err
		}
	}

	f.mu.RLock()
	if !f.ready || rv < f.floor {
		f.mu.RUnlock()
		return f.delegate(ctx, key, opts)
	}
	beyondHead := rv > f.head
	f.mu.RUnlock()
	if beyondHead && !initial {
		// Newer than the ring has seen: fine if the store has it (the
		// events in between are still on their way), otherwise the watch
		// cache gives the proper answer.
		cur, err := f.o.Source.GetCurrentResourceVersion(ctx)
		if err != nil {
			return nil, err
		}
		if rv > cur {
			return f.delegate(ctx, key, opts)
		}
	}

	f.mu.RLock()
	if !f.ready || rv < f.floor {
		f.mu.RUnlock()
		return f.delegate(ctx, key, opts)
	}
	w := &ringWatcher{
		f:         f,
		gen:       f.gen,
		cursor:    f.seqAfterLocked(rv),
		after:     rv,
		lastRV:    rv,
		key:       key,
		recursive: opts.Recursive,
		pred:      opts.Predicate,
		initial:   initialObjs,
		initEnd:   opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.Predicate.AllowWatchBookmarks,
		out:       make(chan watch.Event, 64),
		stop:      make(chan struct{}),
	}
	f.mu.RUnlock()
	if opts.Recursive && !strings.HasSuffix(w.key, "/") {
		w.key += "/"
	}
	watchersGauge.WithLabelValues(f.o.Resource).Inc()
	go w.run(ctx)
	return w, nil
}

func (f *Fanout) delegate(ctx context.Context, key string, opts k8sstorage.ListOptions) (watch.Interface, error) {
	watchesDelegated.WithLabelValues(f.o.Resource).Inc()
	f.awaitSource(ctx)
	return f.o.Source.Watch(ctx, key, opts)
}

// awaitReady waits, up to StartWait, for the ring to serve watches (it
// fills from one list of the store when the resource's storage starts, or
// again after its watch of the store ended), and reports whether it does.
func (f *Fanout) awaitReady(ctx context.Context) bool {
	t := time.NewTimer(f.o.StartWait)
	defer t.Stop()
	for {
		f.mu.RLock()
		ready, changed := f.ready, f.notify
		f.mu.RUnlock()
		if ready {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		}
	}
}

// sourcePoll is how often awaitSource asks whether the watch cache is
// ready (it tells no one when it becomes so).
const sourcePoll = 10 * time.Millisecond

// awaitSource waits, up to StartWait, for the watch cache to serve
// watches (SourceReady).
func (f *Fanout) awaitSource(ctx context.Context) {
	if f.o.SourceReady == nil || f.o.SourceReady() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.StartWait)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, sourcePoll, false, func(context.Context) (bool, error) {
		return f.o.SourceReady(), nil
	})
}

// seqAfterLocked returns the sequence number of the first ring entry above
// rv (next if none). Call with mu held.
func (f *Fanout) seqAfterLocked(rv uint64) uint64 {
	n := int(f.next - f.first)
	i := sort.Search(n, func(i int) bool {
		return f.ring[(f.first+uint64(i))%uint64(len(f.ring))].rv > rv
	})
	return f.first + uint64(i)
}

// Wrap returns s (the source, or storage in front of it) with its watches
// served by f.
func (f *Fanout) Wrap(s k8sstorage.Interface) k8sstorage.Interface {
	return &fannedOut{Interface: s, fanout: f}
}

// fannedOut is a resource's cached storage with watches served by a
// Fanout.
type fannedOut struct {
	k8sstorage.Interface
	fanout *Fanout
}

func (s *fannedOut) Watch(ctx context.Context, key string, opts k8sstorage.ListOptions) (watch.Interface, error) {
	return s.fanout.Watch(ctx, key, opts)
}

// GetList waits for the watch cache to fill (up to StartWait) when it
// would answer the list itself: the watch cache passes a list to the
// store while it fills only when the list has a limit and no selector,
// and answers any other with 429 "storage is (re)initializing".
func (s *fannedOut) GetList(ctx context.Context, key string, opts k8sstorage.ListOptions, listObj runtime.Object) error {
	p := opts.Predicate
	if (p.Label != nil && !p.Label.Empty()) || (p.Field != nil && !p.Field.Empty()) || p.Limit <= 0 {
		s.fanout.awaitSource(ctx)
	}
	return s.Interface.GetList(ctx, key, opts, listObj)
}
