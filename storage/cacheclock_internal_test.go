package storage

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// recordingClock records the durations the watch cache asks its timers
// for, by timer.
type recordingClock struct {
	clock.WithTicker
	mu     sync.Mutex
	timers [][]time.Duration // per timer: NewTimer's duration, then each Reset's
}

func (c *recordingClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, []time.Duration{d})
	return &recordedTimer{Timer: c.WithTicker.NewTimer(d), c: c, i: len(c.timers) - 1}
}

func (c *recordingClock) snapshot() [][]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]time.Duration, len(c.timers))
	for i, ds := range c.timers {
		out[i] = append([]time.Duration(nil), ds...)
	}
	return out
}

type recordedTimer struct {
	clock.Timer
	c *recordingClock
	i int
}

func (t *recordedTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	t.c.timers[t.i] = append(t.c.timers[t.i], d)
	t.c.mu.Unlock()
	return t.Timer.Reset(d)
}

// TestBookmarkClock_OneTimer: of the timers upstream's watch cache makes,
// exactly one asks for about a second, NewTimer and every Reset (its
// bookmark tick), and bookmarkClock makes it tick at BookmarkTick. If an
// upstream change adds another such timer, bookmarkClock would stretch
// it too: this fails, and bookmarkClock needs another look.
func TestBookmarkClock_OneTimer(t *testing.T) {
	// teststore's, which imports this package.
	be, err := sqlstore.Open(context.Background(), sqlstore.Options{DSN: "sqlite://" + filepath.Join(t.TempDir(), "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop()})
	t.Cleanup(func() { srv.Stop(time.Second) })
	client := Local(srv)
	t.Cleanup(func() { _ = client.Close() })
	compactor := NewCompactor(client, 0)
	t.Cleanup(compactor.Stop)
	codec, _, err := serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType: runtime.ContentTypeProtobuf, StorageSerializer: serializer.NewCodecFactory(clientgoscheme.Scheme),
		StorageVersion: corev1.SchemeGroupVersion, MemoryVersion: corev1.SchemeGroupVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Codec: codec, NewFunc: func() runtime.Object { return &corev1.ConfigMap{} }, NewListFunc: func() runtime.Object { return &corev1.ConfigMapList{} },
		ResourcePrefix: "/configmaps", GroupResource: schema.GroupResource{Resource: "configmaps"}, Compactor: compactor,
	}
	store, err := NewStore(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingClock{}
	const tick = 20 * time.Millisecond
	c, err := NewCacher(CacherOptions{
		Store: store, Options: opts, BookmarkTick: tick,
		KeyFunc: func(obj runtime.Object) (string, error) {
			m := obj.(*corev1.ConfigMap)
			return "/configmaps/" + m.Namespace + "/" + m.Name, nil
		},
		GetAttrs: func(obj runtime.Object) (labels.Set, fields.Set, error) {
			return obj.(*corev1.ConfigMap).Labels, fields.Set{"metadata.name": obj.(*corev1.ConfigMap).Name}, nil
		},
		wrapClock: func(inner clock.WithTicker) clock.WithTicker { rec.WithTicker = inner; return rec },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	// The bookmark timer, made once the cache is filled, ticks at tick:
	// reset three times within 2 s, which at upstream's pace takes
	// 2.25 s at least.
	var bookmark []time.Duration
	deadline := time.Now().Add(10 * time.Second)
	var first time.Time
	for {
		bookmark = nil
		n := 0
		for _, ds := range rec.snapshot() {
			ticks := 0
			for _, d := range ds {
				if isBookmarkTick(d) {
					ticks++
				}
			}
			if ticks > 0 {
				n++
				bookmark = ds
				if ticks != len(ds) {
					t.Fatalf("a timer asks for about a second only sometimes: %v", ds)
				}
			}
		}
		if n > 1 {
			t.Fatalf("%d timers ask for about a second, want the bookmark tick alone: %v", n, rec.snapshot())
		}
		if len(bookmark) >= 4 {
			break
		}
		if bookmark != nil && first.IsZero() {
			first = time.Now()
		}
		if time.Now().After(deadline) || !first.IsZero() && time.Since(first) > 2*time.Second {
			t.Fatalf("the bookmark timer was reset %d times at a %v tick; timers: %v", max(len(bookmark)-1, 0), tick, rec.snapshot())
		}
		time.Sleep(tick)
	}
	bc := bookmarkClock{tick: tick}
	for _, d := range bookmark {
		if got := bc.stretch(d); got < tick*3/4 || got > tick*5/4 {
			t.Errorf("a bookmark tick of %v runs %v, want about %v", d, got, tick)
		}
	}
}
