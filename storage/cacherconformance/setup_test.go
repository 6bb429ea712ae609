package cacherconformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/client/v3/kubernetes"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	sqlkubestorage "github.com/sqlkube/sqlkube/storage"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
	// protoCodec stores examplev1 pods as protobuf, as upstream's cacher
	// tests do.
	protoCodec runtime.Codec
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
	pb := protobuf.NewSerializer(scheme, scheme)
	protoCodec = codecs.CodecForVersions(pb, pb, schema.GroupVersions{examplev1.SchemeGroupVersion}, nil)
}

// compactRevKey is where the apiserver's compactor records the last
// compaction (etcd3.compactRevKey).
const compactRevKey = "compact_rev_key"

// waitFor bounds every wait of the setup and the helpers. The longest is
// for the cacher's compactor, which polls the store every 15 seconds.
const waitFor = 45 * time.Second

// setupOptions shape the cacher, as upstream's test setup does.
type setupOptions struct {
	resourcePrefix string
	keyFunc        func(runtime.Object) (string, error)
	indexerFuncs   storage.IndexerFuncs
	indexers       cache.Indexers
	// codec and transformer are the store's and the cacher's (default:
	// protoCodec, and the identity transformer as NewStore's default).
	codec       runtime.Codec
	transformer value.Transformer
	// fanout serves the env's watches from sqlkube's fan-out ring
	// (storage.Fanout, as storage.NewCached does) instead of the watch
	// cache's own watchers.
	fanout bool
}

type setupOption func(*setupOptions)

// withCodec stores and caches objects with codec.
func withCodec(codec runtime.Codec) setupOption {
	return func(o *setupOptions) { o.codec = codec }
}

// withTransformer stores values through transformer.
func withTransformer(transformer value.Transformer) setupOption {
	return func(o *setupOptions) { o.transformer = transformer }
}

// withClusterScopedKeyFunc keys objects by name only.
func withClusterScopedKeyFunc(o *setupOptions) {
	o.keyFunc = func(obj runtime.Object) (string, error) {
		return storage.NoNamespaceKeyFunc(o.resourcePrefix, obj)
	}
}

// withNodeNameAndNamespaceIndex indexes watchers by spec.nodeName and the
// cache by node and namespace, as kube-apiserver does for pods.
func withNodeNameAndNamespaceIndex(o *setupOptions) {
	o.indexerFuncs = storage.IndexerFuncs{
		"spec.nodeName": func(obj runtime.Object) string {
			pod, ok := obj.(*example.Pod)
			if !ok {
				return ""
			}
			return pod.Spec.NodeName
		},
	}
	o.indexers = cache.Indexers{
		"f:spec.nodeName": func(obj any) ([]string, error) {
			return []string{obj.(*example.Pod).Spec.NodeName}, nil
		},
		"f:metadata.namespace": func(obj any) ([]string, error) {
			return []string{obj.(*example.Pod).Namespace}, nil
		},
	}
}

// env is one test's world: a fresh SQLite database, a sqlkube etcd server on
// it reached in-process, the etcd3 store on that client, and the watch cache
// in front of the store.
type env struct {
	// cacher is what the tests run against: the delegator that serves
	// from the watch cache or passes through to the store, as
	// kube-apiserver's registry sees it, with watches served by the
	// fan-out ring if asked for.
	cacher storage.Interface
	// delegator is the delegator itself.
	delegator *cacher.CacheDelegator
	// watchCache is the cacher behind it.
	watchCache *cacher.Cacher
	// store is the cacher's view of the etcd3 store.
	store    *relistingStore
	client   *kubernetes.Client
	recorder *storagetesting.KubernetesRecorder
}

// newEnv builds an env; everything is torn down when t ends. Feature gates
// must be set before calling it.
func newEnv(t *testing.T, opts ...setupOption) *env {
	t.Helper()
	o := setupOptions{resourcePrefix: "/pods/", codec: protoCodec, transformer: identity.NewEncryptCheckTransformer()}
	o.keyFunc = func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(o.resourcePrefix, obj) }
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()

	be, err := sqlstore.Open(ctx, sqlstore.Options{DSN: sqliteDSN(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() { _ = be.Close() })
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop()})
	t.Cleanup(func() { srv.Stop(time.Second) })

	client := sqlkubestorage.Local(srv)
	t.Cleanup(func() { _ = client.Close() })
	// Record lists the way upstream's test server does.
	recorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	client.Kubernetes = recorder
	waitUntil(t, "the apiserver's feature checker to find progress requests supported", func() bool {
		return etcdfeature.DefaultFeatureSupportChecker.Supports(storage.RequestWatchProgress)
	})

	compactor := sqlkubestorage.NewCompactor(client, 0)
	t.Cleanup(compactor.Stop)
	s, err := sqlkubestorage.NewStore(client, sqlkubestorage.Options{
		Codec:          o.codec,
		NewFunc:        newPod,
		NewListFunc:    newPodList,
		ResourcePrefix: "/pods/",
		GroupResource:  schema.GroupResource{Resource: "pods"},
		Transformer:    o.transformer,
		Compactor:      compactor,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.(interface{ Close() }).Close)

	// Inject one list error so that the cacher's relist path runs too,
	// unless the cacher's reflector starts with a watch-list instead of a
	// list (client-go's WatchListClient), as upstream.
	listErrors := 1
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		listErrors = 0
	}
	injecting := &storagetesting.StorageInjectingListErrors{Interface: s, Errors: listErrors}
	store := &relistingStore{Interface: injecting}
	c, err := sqlkubestorage.NewCacher(sqlkubestorage.CacherOptions{
		Store: store,
		Options: sqlkubestorage.Options{
			Codec:          o.codec,
			NewFunc:        newPod,
			NewListFunc:    newPodList,
			ResourcePrefix: o.resourcePrefix,
			GroupResource:  schema.GroupResource{Resource: "pods"},
		},
		GetAttrs:            podAttrs,
		KeyFunc:             o.keyFunc,
		IndexerFuncs:        o.indexerFuncs,
		Indexers:            &o.indexers,
		EventsHistoryWindow: cacher.DefaultEventFreshDuration,
	})
	if err != nil {
		t.Fatalf("NewCacher: %v", err)
	}
	// Some tests expect GetList never to fail: let the cacher consume the
	// injected error first.
	waitUntil(t, "the cacher to consume the injected list error", func() bool {
		done, _ := injecting.ErrorsConsumed()
		return done
	})
	// The tests expect reads and watches not to fail while the cache
	// initializes (with ResilientWatchCacheInitialization they would get
	// 429s, without it "storage is (re)initializing"), so wait for it
	// whatever the gates, as upstream's test setup effectively does.
	waitUntil(t, "the cacher to be ready", c.Ready)
	d := cacher.NewCacheDelegator(c, store)
	t.Cleanup(func() {
		d.Stop()
		c.Stop()
	})
	var subject storage.Interface = d
	if o.fanout {
		f := sqlkubestorage.NewFanout(sqlkubestorage.FanoutOptions{
			Source: d, Store: store, ResourcePrefix: o.resourcePrefix, Resource: "pods",
			KeyFunc: o.keyFunc, GetAttrs: podAttrs, NewFunc: newPod, NewListFunc: newPodList,
		})
		t.Cleanup(f.Stop)
		waitUntil(t, "the fan-out to be ready", f.Ready)
		subject = f.Wrap(d)
	}
	return &env{cacher: subject, delegator: d, watchCache: c, store: store, client: client, recorder: recorder}
}

// sqliteDSN returns a fresh SQLite database, or skips the test when
// SQLKUBE_TEST_BACKENDS leaves SQLite out.
func sqliteDSN(t *testing.T) string {
	t.Helper()
	for _, b := range sqltest.Backends() {
		if b.Name == sqltest.SQLite {
			return b.NewDSN(t)
		}
	}
	t.Skip("SQLKUBE_TEST_BACKENDS leaves out sqlite")
	return ""
}

// waitUntil polls cond until it holds, failing the test after waitFor.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newPod() runtime.Object     { return &example.Pod{} }
func newPodList() runtime.Object { return &example.PodList{} }

// podAttrs returns the labels and the fields selectors match on, as the
// registry's pod strategy does.
func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*example.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), fields.Set{
		"spec.nodeName":      pod.Spec.NodeName,
		"spec.restartPolicy": string(pod.Spec.RestartPolicy),
		"status.phase":       string(pod.Status.Phase),
		"metadata.name":      pod.Name,
		"metadata.namespace": pod.Namespace,
	}, nil
}

// increaseRV moves the etcd revision forward with a write outside the
// cached keys and returns the revision of the write.
func (e *env) increaseRV() storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := e.client.KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("put increaseRV: %v", err)
		}
		return resp.Header.Revision
	}
}

// compactStore compacts etcd up to resourceVersion as the apiserver's
// compactor does and, when the cacher follows compactions
// (ListFromCacheSnapshot), waits until the cacher has dropped its snapshots
// from before it. Upstream calls the cacher's compactor directly; from
// outside, that is waiting for its next poll of the store.
func (e *env) compactStore() storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv := parseRV(t, resourceVersion)
		resp, err := e.client.Client.Get(ctx, compactRevKey)
		if err != nil {
			t.Fatalf("read %s: %v", compactRevKey, err)
		}
		var version int64
		if len(resp.Kvs) > 0 {
			version = resp.Kvs[0].Version
		}
		if _, _, compacted, err := etcd3.Compact(ctx, e.client.Client, version, int64(rv)); err != nil || compacted != int64(rv) {
			t.Fatalf("compact to %d: compacted to %d, %v", rv, compacted, err)
		}
		if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
			return
		}
		waitUntil(t, fmt.Sprintf("the cacher to observe compaction to %d", rv), func() bool {
			return e.delegator.CompactRevision() >= int64(rv)
		})
	}
}

// compactWatch makes the watch cache forget its history up to
// resourceVersion and compacts etcd there, so that watches from before it
// end with 410 Gone. Upstream trims the cache's event window in place; from
// outside, the cache is made to catch up to resourceVersion, etcd is
// compacted, and the cacher's watch on the store ends as expired, so that
// the cacher relists (at or past the compaction) and starts a new
// window. Like upstream, it expects no watches open on the cacher.
func (e *env) compactWatch() storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv := parseRV(t, resourceVersion)
		// A list not older than rv is served by the cache once it has
		// seen rv.
		if err := e.cacher.GetList(ctx, "/pods", storage.ListOptions{
			ResourceVersion:      resourceVersion,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			Predicate:            storage.Everything,
			Recursive:            true,
		}, &example.PodList{}); err != nil {
			t.Fatalf("the watch cache did not catch up to %d: %v", rv, err)
		}
		if _, err := e.client.Client.Compact(ctx, int64(rv)); err != nil {
			t.Fatalf("compact to %d: %v", rv, err)
		}
		e.store.expireWatches(t)
	}
}

func parseRV(t *testing.T, resourceVersion string) uint64 {
	t.Helper()
	rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// createWrapper makes Create return only once the watch cache holds the
// created object, for the watch semantics tests that read their own writes
// from the cache.
type createWrapper struct {
	storage.Interface
}

func (c createWrapper) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	if err := c.Interface.Create(ctx, key, obj, out, ttl); err != nil {
		return err
	}
	deadline := time.Now().Add(waitFor)
	for {
		cur := newPod()
		err := c.Interface.Get(ctx, key, storage.GetOptions{ResourceVersion: "0"}, cur)
		switch {
		case err == nil && apiequality.Semantic.DeepEqual(cur, out):
			return nil
		case err != nil && !storage.IsNotFound(err):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("the watch cache did not see %s created within %v", key, waitFor)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// withCreateWrapper returns the env's cacher, ready, with createWrapper.
func (e *env) withCreateWrapper(t *testing.T) storage.Interface {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.watchCache.Wait(ctx); err != nil {
		t.Fatalf("cacher not ready: %v", err)
	}
	return createWrapper{e.cacher}
}

// failingTransformer cannot read values back while its fail switch
// (setFailing) is on.
type failingTransformer struct {
	value.Transformer
	fail atomic.Bool
}

func (f *failingTransformer) setFailing(fail bool) { f.fail.Store(fail) }

func (f *failingTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	if f.fail.Load() {
		return nil, false, errors.New("bits flipped")
	}
	return f.Transformer.TransformFromStorage(ctx, data, dataCtx)
}

// failingCodec decodes nothing while its fail switch (setFailing) is on.
type failingCodec struct {
	runtime.Codec
	fail atomic.Bool
}

func (c *failingCodec) setFailing(fail bool) { c.fail.Store(fail) }

func (c *failingCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if c.fail.Load() {
		return nil, nil, errors.New("bits flipped")
	}
	return c.Codec.Decode(data, defaults, into)
}
