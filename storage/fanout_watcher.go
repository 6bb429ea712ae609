package storage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
)

// ringWatcher is one watch served from the ring.
type ringWatcher struct {
	f      *Fanout
	gen    uint64
	cursor uint64
	// after: entries at or below it are not delivered. lastRV: the latest
	// resourceVersion delivered (event or bookmark), which bookmarks must
	// move past.
	after, lastRV uint64
	key           string
	recursive     bool
	pred          k8sstorage.SelectionPredicate
	initial       []runtime.Object
	initEnd       bool

	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	batch    []*ringEntry
}

func (w *ringWatcher) ResultChan() <-chan watch.Event { return w.out }

func (w *ringWatcher) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

var errWatcherDone = errors.New("watcher done")

// send delivers ev unless the watch is stopped first.
func (w *ringWatcher) send(ctx context.Context, ev watch.Event) error {
	select {
	case w.out <- ev:
		return nil
	case <-w.stop:
		return errWatcherDone
	case <-ctx.Done():
		return errWatcherDone
	}
}

func (w *ringWatcher) run(ctx context.Context) {
	resource := w.f.o.Resource
	defer watchersGauge.WithLabelValues(resource).Dec()
	defer close(w.out)
	dispatched := eventsDispatched.WithLabelValues(resource)

	for _, obj := range w.initial {
		if err := w.send(ctx, watch.Event{Type: watch.Added, Object: obj}); err != nil {
			return
		}
		dispatched.Inc()
	}
	w.initial = nil
	if w.initEnd {
		if err := w.send(ctx, watch.Event{Type: watch.Bookmark, Object: w.bookmark(w.after, true)}); err != nil {
			return
		}
	}
	// Tell API priority and fairness that the watch's initialization is
	// over (its seat is released), as the watch cache does.
	utilflowcontrol.WatchInitialized(ctx)

	var bookmarkDue <-chan time.Time
	if w.pred.AllowWatchBookmarks {
		every := w.f.o.BookmarkEvery
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline)-2*time.Second < every {
			every = max(time.Until(deadline)-2*time.Second, 0)
		}
		t := time.NewTimer(every)
		defer t.Stop()
		bookmarkDue = t.C
	}
	wantBookmark := false

	for {
		f := w.f
		f.mu.RLock()
		if f.gen != w.gen {
			// The ring was rebuilt (or stopped): end the watch; the
			// client watches again from what it received.
			f.mu.RUnlock()
			return
		}
		if w.cursor < f.first {
			f.mu.RUnlock()
			watchersTerminated.WithLabelValues(resource).Inc()
			_ = w.send(ctx, watch.Event{Type: watch.Error, Object: tooSlowStatus(f.o.Buffer)})
			return
		}
		end := min(f.next, w.cursor+256)
		w.batch = w.batch[:0]
		for s := w.cursor; s < end; s++ {
			w.batch = append(w.batch, f.ring[s%uint64(len(f.ring))])
		}
		caughtUp, head, notify := end == f.next, f.head, f.notify
		f.mu.RUnlock()

		for _, e := range w.batch {
			if ev, ok := w.convert(e); ok {
				if err := w.send(ctx, ev); err != nil {
					return
				}
				w.lastRV = e.rv
				dispatched.Inc()
			}
			w.cursor++
		}
		if len(w.batch) > 0 && !caughtUp {
			continue
		}
		if wantBookmark && caughtUp {
			// Every event up to head has been seen, so head is a safe
			// point to resume from even if nothing new came.
			w.lastRV = max(head, w.lastRV)
			if err := w.send(ctx, watch.Event{Type: watch.Bookmark, Object: w.bookmark(w.lastRV, false)}); err != nil {
				return
			}
			wantBookmark = false
		}
		if len(w.batch) > 0 {
			continue
		}
		select {
		case <-notify:
		case <-bookmarkDue:
			wantBookmark = true
			bookmarkDue = time.After(w.f.o.BookmarkEvery)
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// convert turns a ring entry into the event this watcher sees, if any: as
// the watch cache does, an object entering the selection is Added, one
// leaving it Deleted (its last state that matched, at the new
// resourceVersion). The event's object is the watcher's own (ownCopy).
func (w *ringWatcher) convert(e *ringEntry) (watch.Event, bool) {
	if e.rv <= w.after {
		return watch.Event{}, false
	}
	cur := e.typ != watch.Deleted && w.matches(e.key, e.cur)
	old := false
	if e.typ == watch.Deleted {
		old = w.matches(e.key, e.cur)
	} else if e.prev != nil {
		old = w.matches(e.key, *e.prev)
	}
	switch {
	case cur && !old:
		return watch.Event{Type: watch.Added, Object: ownCopy(e.cur.obj)}, true
	case cur && old:
		return watch.Event{Type: watch.Modified, Object: ownCopy(e.cur.obj)}, true
	case !cur && old && e.typ == watch.Deleted:
		return watch.Event{Type: watch.Deleted, Object: ownCopy(e.cur.obj)}, true
	case !cur && old:
		obj := mutableCopy(e.prev.obj)
		if err := (k8sstorage.APIObjectVersioner{}).UpdateObject(obj, e.rv); err != nil {
			return watch.Event{}, false
		}
		return watch.Event{Type: watch.Deleted, Object: obj}, true
	}
	return watch.Event{}, false
}

func (w *ringWatcher) matches(key string, st objectState) bool {
	if w.recursive {
		if !strings.HasPrefix(key, w.key) {
			return false
		}
	} else if key != w.key {
		return false
	}
	if w.pred.Label == nil && w.pred.Field == nil {
		return true
	}
	if w.pred.Label == nil {
		w.pred.Label = labels.Everything()
	}
	if w.pred.Field == nil {
		w.pred.Field = fields.Everything()
	}
	return w.pred.MatchesObjectAttributes(st.labels, st.fields)
}

// bookmark makes a bookmark object at rv, marked as the end of the initial
// events if end.
func (w *ringWatcher) bookmark(rv uint64, end bool) runtime.Object {
	obj := w.f.o.NewFunc()
	_ = k8sstorage.APIObjectVersioner{}.UpdateObject(obj, rv)
	if end {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		}
	}
	return obj
}

// ownCopy returns a copy of obj's top level for one watcher; what that
// points to stays shared with the event's other watchers and must not be
// changed.
//
// A ring entry's object goes to every watcher the event matches, and each
// hands it to an encoder of its own. Encoders set an object's apiVersion
// and kind while they write it and put back what was there after, so with
// one shared object, one encoder could put back the empty kind of an
// object read through the internal version (a cluster trust bundle, say)
// while another was writing it: the client cannot decode that event, ends
// its watch and lists again, and the events in between reach it as one (a
// create and a patch as a single add). kube-apiserver's watch cache gives
// its watchers their own copy or an object that copies itself before a
// change; a top-level copy is enough here, as that is all an encoder
// changes, and it costs one allocation, not a deep copy, per watcher.
func ownCopy(obj runtime.Object) runtime.Object {
	switch o := obj.(type) {
	case runtime.CacheableObject:
		return obj // copies itself before it is changed
	case *unstructured.Unstructured:
		// apiVersion and kind are entries of the top-level map.
		return &unstructured.Unstructured{Object: maps.Clone(o.Object)}
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj.DeepCopyObject()
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(runtime.Object)
}

func mutableCopy(obj runtime.Object) runtime.Object {
	if c, ok := obj.(runtime.CacheableObject); ok {
		return c.GetObject()
	}
	return obj.DeepCopyObject()
}

func tooSlowStatus(ring int) *metav1.Status {
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusTooManyRequests,
		Reason:  metav1.StatusReasonTooManyRequests,
		Message: fmt.Sprintf("watch terminated: the client fell more than %d events behind; watch again from the last resourceVersion received", ring),
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}
}
