package cacherconformance

import (
	"context"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// relistingStore is the store as the cacher sees it. A test can end the
// cacher's watches on it as expired (410 Gone), as etcd ends a watch whose
// revision was compacted: the cacher then relists and starts its event
// window afresh.
type relistingStore struct {
	storage.Interface

	mu      sync.Mutex
	watches []*expirableWatch // open watches
	started int               // Watch calls so far
}

func (s *relistingStore) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := s.Interface.Watch(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	ew := newExpirableWatch(w)
	s.mu.Lock()
	s.watches = append(s.watches, ew)
	s.started++
	s.mu.Unlock()
	return ew, nil
}

// expireWatches ends every open watch with 410 Gone and waits until the
// cacher watches again, which it does only after relisting and replacing
// its contents.
func (s *relistingStore) expireWatches(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	open, before := s.watches, s.started
	s.watches = nil
	s.mu.Unlock()
	for _, w := range open {
		w.expire()
	}
	waitUntil(t, "the cacher to relist and watch again", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.started > before
	})
}

// expirableWatch passes a watch's events on until it is stopped or
// expired; expired, it ends with a 410 Gone error event.
type expirableWatch struct {
	inner   watch.Interface
	out     chan watch.Event
	stop    chan struct{} // closed by Stop
	expired chan struct{} // closed by expire

	stopOnce, expireOnce sync.Once
}

func newExpirableWatch(inner watch.Interface) *expirableWatch {
	w := &expirableWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{}), expired: make(chan struct{})}
	go w.run()
	return w
}

func (w *expirableWatch) run() {
	defer close(w.out)
	defer w.inner.Stop()
	for {
		select {
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			select {
			case w.out <- ev:
				continue
			case <-w.stop:
				return
			case <-w.expired:
				// The event is dropped: the cacher relists anyway.
			}
		case <-w.stop:
			return
		case <-w.expired:
		}
		gone := apierrors.NewResourceExpired("the test expired this watch").ErrStatus
		select {
		case w.out <- watch.Event{Type: watch.Error, Object: &gone}:
		case <-w.stop:
		}
		return
	}
}

func (w *expirableWatch) expire() { w.expireOnce.Do(func() { close(w.expired) }) }

func (w *expirableWatch) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

func (w *expirableWatch) ResultChan() <-chan watch.Event { return w.out }
