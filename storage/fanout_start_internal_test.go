package storage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
)

// startingCache stands for a watch cache that is filling: its lists wait
// for fill, and until then its watches answer 429 as upstream's do.
type startingCache struct {
	k8sstorage.Interface // not called
	fill                 chan struct{}
	ready                atomic.Bool
	listRV               string
	watches              atomic.Int32
}

func (s *startingCache) GetList(ctx context.Context, _ string, _ k8sstorage.ListOptions, list runtime.Object) error {
	select {
	case <-s.fill:
	case <-ctx.Done():
		return ctx.Err()
	}
	list.(*corev1.PodList).ResourceVersion = s.listRV
	return nil
}

func (s *startingCache) Watch(context.Context, string, k8sstorage.ListOptions) (watch.Interface, error) {
	s.watches.Add(1)
	if !s.ready.Load() {
		return nil, apierrors.NewTooManyRequests("storage is (re)initializing", 1)
	}
	return watch.NewEmptyWatch(), nil
}

// quietStore is a store whose watch sends nothing.
type quietStore struct{ k8sstorage.Interface }

func (quietStore) Watch(context.Context, string, k8sstorage.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

func startingFanout(t *testing.T, listRV string) (*Fanout, *startingCache) {
	t.Helper()
	src := &startingCache{fill: make(chan struct{}), listRV: listRV}
	f := NewFanout(FanoutOptions{
		Source: src, Store: quietStore{}, ResourcePrefix: "/pods", Resource: "pods",
		KeyFunc:  func(runtime.Object) (string, error) { return "", nil },
		GetAttrs: func(runtime.Object) (labels.Set, fields.Set, error) { return nil, nil, nil },
		NewFunc:  func() runtime.Object { return &corev1.Pod{} }, NewListFunc: func() runtime.Object { return &corev1.PodList{} },
		SourceReady: src.ready.Load, StartWait: time.Minute,
	})
	t.Cleanup(f.Stop)
	return f, src
}

// TestFanout_WatchWaitsForStart: a watch made while the resource's
// storage starts waits for it instead of getting 429 "storage is
// (re)initializing", after which client-go's reflectors wait a second
// or more: a tenant's informers, which start with its API, took that
// long to sync on PostgreSQL, where the first lists are slower.
func TestFanout_WatchWaitsForStart(t *testing.T) {
	watchAsync := func(f *Fanout, rv string) chan error {
		done := make(chan error, 1)
		go func() {
			w, err := f.Watch(context.Background(), "/pods/", k8sstorage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: k8sstorage.Everything})
			if err == nil {
				w.Stop()
			}
			done <- err
		}()
		return done
	}
	notYet := func(done chan error) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("the watch returned (%v) before its storage was ready", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	t.Run("the ring fills", func(t *testing.T) {
		f, src := startingFanout(t, "10")
		done := watchAsync(f, "10")
		notYet(done)
		src.ready.Store(true)
		close(src.fill) // the ring's list returns: it serves from 10
		if err := <-done; err != nil {
			t.Fatalf("watch from the filled ring: %v", err)
		}
		if n := src.watches.Load(); n != 0 {
			t.Fatalf("the watch cache got %d watches, want the ring to serve it", n)
		}
	})

	t.Run("older than the ring: the watch cache fills", func(t *testing.T) {
		f, src := startingFanout(t, "10")
		close(src.fill) // the ring serves from 10; the watch cache is not ready
		if !f.awaitReady(context.Background()) {
			t.Fatal("the ring did not fill")
		}
		done := watchAsync(f, "5")
		notYet(done)
		src.ready.Store(true)
		if err := <-done; err != nil {
			t.Fatalf("watch passed to the watch cache once ready: %v", err)
		}
	})

	t.Run("bounded", func(t *testing.T) {
		f, src := startingFanout(t, "10")
		f.o.StartWait = 20 * time.Millisecond
		err := <-watchAsync(f, "10")
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("a watch of storage that stays unready: %v, want the watch cache's 429 after StartWait", err)
		}
		close(src.fill)
	})
}
