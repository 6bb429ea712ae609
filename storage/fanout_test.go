package storage_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
)

// TestFanout_WatchersOwnTheirObjects: every watcher an event goes to gets
// an object of its own. Encoders write an object's apiVersion and kind
// into it while they encode it and restore them after, so watchers that
// encoded one shared object at the same time sent events without a kind,
// which clients cannot decode (they list again, and a create and an update
// in between reach them as one add).
func TestFanout_WatchersOwnTheirObjects(t *testing.T) {
	ctx := context.Background()
	cached := newCachedPods(t, nil)
	deadline := time.Now().Add(20 * time.Second)
	for !cached.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("watch cache and fan-out not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rv, err := cached.GetCurrentResourceVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var watchers [2]watch.Interface
	for i := range watchers {
		w, err := cached.Watch(ctx, "/pods/", k8sstorage.ListOptions{
			ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: k8sstorage.Everything,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		watchers[i] = w
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}
	if err := cached.Create(ctx, "/pods/default/a", pod, &corev1.Pod{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := cached.Delete(ctx, "/pods/default/a", &corev1.Pod{}, nil, k8sstorage.ValidateAllObjectFunc, nil, k8sstorage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []watch.EventType{watch.Added, watch.Deleted} {
		var got [2]watch.Event
		for i, w := range watchers {
			select {
			case got[i] = <-w.ResultChan():
			case <-time.After(10 * time.Second):
				t.Fatalf("watcher %d: no %s event", i, want)
			}
			if got[i].Type != want {
				t.Fatalf("watcher %d: got a %s event, want %s", i, got[i].Type, want)
			}
			if _, wrapped := got[i].Object.(runtime.CacheableObject); wrapped {
				t.Fatalf("watcher %d: served by the watch cache, not the fan-out ring", i)
			}
		}
		if got[0].Object == got[1].Object {
			t.Fatalf("%s: both watchers got the same object %p", want, got[0].Object)
		}
		// What an encoder does to the object it encodes (and undoes).
		before := got[1].Object.GetObjectKind().GroupVersionKind()
		got[0].Object.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Other"))
		if gvk := got[1].Object.GetObjectKind().GroupVersionKind(); gvk != before {
			t.Fatalf("%s: setting the kind of one watcher's object changed the other's from %v to %v", want, before, gvk)
		}
	}
}
