package etcd3conformance

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/utils/ptr"
)

// Checks upstream keeps among the etcd3 package's implementation tests
// (they reach into the store's internals there) or in its test harness,
// redone through storage.Interface or the etcd client because they pin etcd
// behaviour the store relies on. They are not counted among the conformance
// tests.

// TestGetCurrentResourceVersion checks that the store's current resource
// version is etcd's global revision, moved by writes to any key.
func TestGetCurrentResourceVersion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-1"}}
		created := &example.Pod{}
		if err := e.store.Create(ctx, "/pods/ns/pod-1", pod, created, 0); err != nil {
			t.Fatalf("Create: %v", err)
		}
		podRV, err := e.store.Versioner().ParseResourceVersion(created.ResourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.store.GetCurrentResourceVersion(ctx)
		if err != nil || got != podRV {
			t.Fatalf("GetCurrentResourceVersion after Create = %d, %v; want the pod's %d", got, err, podRV)
		}

		resp, err := e.client.KV.Put(ctx, compactRevKey, created.ResourceVersion)
		if err != nil {
			t.Fatalf("unrelated Put: %v", err)
		}
		got, err = e.store.GetCurrentResourceVersion(ctx)
		if err != nil || got != uint64(resp.Header.Revision) {
			t.Fatalf("GetCurrentResourceVersion after an unrelated write = %d, %v; want etcd's revision %d", got, err, resp.Header.Revision)
		}

		current := &example.Pod{}
		if err := e.store.Get(ctx, "/pods/ns/pod-1", storage.GetOptions{}, current); err != nil {
			t.Fatalf("Get: %v", err)
		}
		if current.ResourceVersion != created.ResourceVersion {
			t.Errorf("pod resourceVersion = %s after an unrelated write, want %s", current.ResourceVersion, created.ResourceVersion)
		}
	})
}

// TestTooLargeResourceVersionErrorForWatchList checks that a watch-list
// from a revision etcd has not reached yet ends with the "too large
// resource version" error (etcd: "required revision is a future
// revision"), with a retry hint.
func TestTooLargeResourceVersionErrorForWatchList(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.WatchList, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		const futureRV = 102
		cur, err := e.store.GetCurrentResourceVersion(ctx)
		if err != nil || cur >= futureRV {
			t.Fatalf("current resource version %d, %v; want below %d", cur, err, futureRV)
		}
		var want *apierrors.StatusError
		if !errors.As(storage.NewTooLargeResourceVersionError(futureRV, 1, 0), &want) {
			t.Fatal("NewTooLargeResourceVersionError is not a StatusError")
		}

		watchCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := e.store.Watch(watchCtx, "/pods/abc", storage.ListOptions{
			ResourceVersion:   strconv.Itoa(futureRV),
			SendInitialEvents: ptr.To(true),
			Recursive:         true,
			Predicate:         storage.Everything,
		})
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		defer w.Stop()

		ev := <-w.ResultChan()
		if ev.Type != watch.Error {
			t.Fatalf("first event %v, want %v", ev.Type, watch.Error)
		}
		got, ok := ev.Object.(*metav1.Status)
		if !ok {
			t.Fatalf("error event carries %T, want *metav1.Status", ev.Object)
		}
		if got.Details == nil || got.Details.RetryAfterSeconds <= 0 {
			t.Fatalf("status details %+v, want RetryAfterSeconds > 0", got.Details)
		}
		want.ErrStatus.Details = got.Details // carries the retry hint
		if diff := cmp.Diff(want.ErrStatus, *got); diff != "" {
			t.Errorf("status (-want +got):\n%s", diff)
		}
	})
}

// TestRangeStream checks what upstream's TestList checks with the
// EtcdRangeStream gate on (on by default since Kubernetes 1.37): that the
// server serves etcd's RangeStream, which the store reads lists and a
// watch's initial state with. A server that answers Unimplemented is paged
// instead, after one wasted request every 10 minutes.
func TestRangeStream(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		for _, name := range []string{"pod-1", "pod-2"} {
			pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
			if err := e.store.Create(ctx, "/pods/ns/"+name, pod, &example.Pod{}, 0); err != nil {
				t.Fatalf("Create: %v", err)
			}
		}
		stream, err := e.client.KV.GetStream(ctx, "/pods/", clientv3.WithPrefix())
		var resp *clientv3.GetResponse
		if err == nil {
			resp, err = clientv3.GetStreamToGetResponse(stream)
		}
		if err != nil {
			t.Fatalf("RangeStream: %v", err)
		}
		if len(resp.Kvs) != 2 || resp.Count != 2 {
			t.Errorf("RangeStream returned %d keys (count %d), want 2", len(resp.Kvs), resp.Count)
		}
	})
}
