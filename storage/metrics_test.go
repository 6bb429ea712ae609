package storage_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/features"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/sqlkube/sqlkube/internal/teststore"
	"github.com/sqlkube/sqlkube/storage"
)

// TestNewCached_Metrics lists pods through the watch cache, once served from
// memory and once passed down to the store, and checks /metrics tells the
// two apart and carries the watch cache's own series.
func TestNewCached_Metrics(t *testing.T) {
	// Without cache snapshots, an exact-resourceVersion list is passed
	// down to the store: that gives this test a list of each source.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, false)
	ctx := context.Background()
	cached := newCachedPods(t, nil)

	var rv string
	for _, name := range []string{"a", "b", "c"} {
		out := &corev1.Pod{}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		if err := cached.Create(ctx, "/pods/default/"+name, pod, out, 0); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		rv = out.ResourceVersion
	}
	list := func(o k8sstorage.ListOptions) *corev1.PodList {
		t.Helper()
		o.Recursive = true
		o.Predicate = k8sstorage.Everything
		l := &corev1.PodList{}
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := cached.GetList(ctx, "/pods/", o, l)
			if err == nil {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("list %+v: %v", o, err)
			}
			time.Sleep(50 * time.Millisecond) // the cache may still be initializing
		}
	}
	// Not older than the last write: the cache answers once it has it.
	if l := list(k8sstorage.ListOptions{ResourceVersion: rv}); len(l.Items) != 3 {
		t.Fatalf("cached list: %d pods, want 3", len(l.Items))
	}
	// An exact resourceVersion goes to the store.
	if l := list(k8sstorage.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}); len(l.Items) != 3 {
		t.Fatalf("exact list: %d pods, want 3", len(l.Items))
	}

	rec := httptest.NewRecorder()
	storage.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`sqlkube_storage_list_duration_seconds_count{resource="pods",source="cache"}`,
		`apiserver_watch_cache_events_received_total`,
		`apiserver_cache_list_total`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if !strings.Contains(text, `sqlkube_storage_list_duration_seconds_count{resource="pods",source="store"}`) {
		t.Errorf("/metrics has no store-served list; lists seen:\n%s", grep(text, "sqlkube_storage_list_duration_seconds_count"))
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// newCachedPods builds storage.NewCached for v1 pods (keys
// /pods/NAMESPACE/NAME, protobuf as kube-apiserver stores them) on a fresh
// SQLite database reached in-process, with label indexes for indexLabels.
// It is stopped when t ends.
func newCachedPods(t *testing.T, indexLabels []string) *storage.Cached {
	t.Helper()
	client := teststore.Local(t, t.TempDir())
	compactor := storage.NewCompactor(client, 0)
	t.Cleanup(compactor.Stop)

	codec, _, err := serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType: runtime.ContentTypeProtobuf, StorageSerializer: serializer.NewCodecFactory(clientgoscheme.Scheme),
		StorageVersion: corev1.SchemeGroupVersion, MemoryVersion: corev1.SchemeGroupVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := storage.Options{
		Codec: codec, NewFunc: func() runtime.Object { return &corev1.Pod{} }, NewListFunc: func() runtime.Object { return &corev1.PodList{} },
		ResourcePrefix: "/pods", GroupResource: schema.GroupResource{Resource: "pods"}, Compactor: compactor,
	}
	store, err := storage.NewStore(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := storage.NewCached(storage.CacherOptions{
		Store: store, Options: opts, IndexLabels: indexLabels,
		KeyFunc: func(obj runtime.Object) (string, error) {
			m, err := metav1.Object(obj.(*corev1.Pod)), error(nil)
			return "/pods/" + m.GetNamespace() + "/" + m.GetName(), err
		},
		GetAttrs: func(obj runtime.Object) (labels.Set, fields.Set, error) {
			p := obj.(*corev1.Pod)
			return p.Labels, fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cached.Stop)
	return cached
}
