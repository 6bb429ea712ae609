package etcd3conformance

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc/grpclog"
	"k8s.io/apimachinery/pkg/api/apitesting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	sqlkubestorage "github.com/sqlkube/sqlkube/storage"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

const (
	// valuePrefix is what the test transformer puts before every stored
	// value, as in the upstream etcd3 tests.
	valuePrefix = "test!"
	// compactRevKey is where the apiserver's compactor records the last
	// compaction (etcd3.compactRevKey).
	compactRevKey = "compact_rev_key"
	// maxListLimit is the largest page the etcd3 store asks for
	// (etcd3.maxLimit); it bounds the page growth the call checks expect.
	maxListLimit = 10000
	// compactionObserveTimeout bounds the wait for the store to see a
	// compaction through compact_rev_key.
	compactionObserveTimeout = 30 * time.Second
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
}

// setupOptions change the world a test runs in.
type setupOptions struct {
	// progressNotifyInterval is the server's progress notification period.
	progressNotifyInterval time.Duration
	// serial runs the ways and backends one after the other.
	serial bool
	// bareEtcd3 builds the store with etcd3.New as upstream's tests do,
	// instead of with storage.NewStore.
	bareEtcd3 bool
	// unsafeCorruptObjectDeletion wraps the store in
	// etcd3.NewStoreWithUnsafeCorruptObjectDeletion.
	unsafeCorruptObjectDeletion bool
}

type setupOption func(*setupOptions)

// withProgressNotifyInterval sets how often the sqlkube etcd server sends
// progress notifications (upstream: the embedded etcd's
// WatchProgressNotifyInterval).
func withProgressNotifyInterval(d time.Duration) setupOption {
	return func(o *setupOptions) { o.progressNotifyInterval = d }
}

// way is how the etcd3 store reaches the sqlkube etcd server; the design
// promises both pass the same tests.
type way string

const (
	// overGRPC dials the server's listener with an etcd v3 client
	// (storage.Remote), exactly as kube-apiserver reaches etcd.
	overGRPC way = "grpc"
	// inProcess calls the server's services in the same process
	// (storage.Local): no listener, no gRPC, no protobuf encoding.
	inProcess way = "local"
)

var ways = []way{overGRPC, inProcess}

// serially runs a test's ways and backends one after the other: needed
// when the upstream test sets feature gates itself, which parallel subtests
// may not.
func serially() setupOption {
	return func(o *setupOptions) { o.serial = true }
}

// withBareEtcd3 builds the store as upstream's etcd3 tests do: etcd3.New
// given the test's transformer and decoder as they are. While
// AllowUnsafeMalformedObjectDeletion is on (the default since 1.37),
// storage.NewStore, like kube-apiserver's storage factory, has the store
// take any value it cannot transform or decode for a corrupt object, which
// lists then collect instead of failing on the first; a few upstream tests
// expect the bare store's errors.
func withBareEtcd3() setupOption {
	return func(o *setupOptions) { o.bareEtcd3 = true }
}

// withUnsafeCorruptObjectDeletion wraps the store in
// etcd3.NewStoreWithUnsafeCorruptObjectDeletion, as kube-apiserver's storage
// factory does while AllowUnsafeMalformedObjectDeletion is on: Get and
// GetList then report corrupt objects as such.
func withUnsafeCorruptObjectDeletion() setupOption {
	return func(o *setupOptions) { o.unsafeCorruptObjectDeletion = true }
}

// env is one test's world: a fresh database, a sqlkube etcd server on it,
// an etcd client reaching that server one way, and the apiserver's etcd3
// storage on that client.
type env struct {
	store       *testStore
	client      *kubernetes.Client
	kv          *storagetesting.KVRecorder
	recorder    *storagetesting.KubernetesRecorder
	transformer *swappableTransformer
	codec       *failingCodec
}

// newEnv builds an env on backend b reached by w; everything is torn down
// when t ends. Feature gates must be set before calling it: the etcd3 store
// and its compactor read them when built.
func newEnv(t *testing.T, b sqltest.Backend, w way, opts ...setupOption) *env {
	t.Helper()
	var o setupOptions
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()

	be, err := sqlstore.Open(ctx, sqlstore.Options{DSN: b.NewDSN(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("open %s store: %v", b.Name, err)
	}
	t.Cleanup(func() { _ = be.Close() })
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop(), ProgressNotifyInterval: o.progressNotifyInterval})
	t.Cleanup(func() { srv.Stop(time.Second) })

	client := connect(t, srv, w)
	// Count reads and record lists the way upstream's test server does.
	recorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	kv := storagetesting.NewKVRecorder(client.KV, recorder)
	client.KV = kv
	client.Kubernetes = recorder

	compactor := sqlkubestorage.NewCompactor(client, 0)
	t.Cleanup(compactor.Stop)

	codec := &failingCodec{Codec: apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)}
	transformer := newSwappableTransformer(storagetesting.NewPrefixTransformer([]byte(valuePrefix), false))
	storeOptions := sqlkubestorage.Options{
		Codec:          codec,
		NewFunc:        func() runtime.Object { return &example.Pod{} },
		NewListFunc:    func() runtime.Object { return &example.PodList{} },
		Prefix:         "/", // keys as the tests name them: /pods/<ns>/<name>
		ResourcePrefix: "/pods/",
		GroupResource:  schema.GroupResource{Resource: "pods"},
		Transformer:    transformer,
		Compactor:      compactor,
		// Upstream shortens lease reuse to 1s so tests never wait on it.
		LeaseReuseDurationSeconds: 1,
	}
	var s storage.Interface
	if o.bareEtcd3 {
		s, err = newBareEtcd3(client, storeOptions)
	} else {
		s, err = sqlkubestorage.NewStore(client, storeOptions)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.(interface{ Close() }).Close)
	etcdStore := s
	if o.unsafeCorruptObjectDeletion {
		s = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(s, storeOptions.GroupResource)
	}

	return &env{
		store:       &testStore{Interface: s, etcd: etcdStore, transformer: transformer},
		client:      client,
		kv:          kv,
		recorder:    recorder,
		transformer: transformer,
		codec:       codec,
	}
}

// newBareEtcd3 builds the etcd3 store from o as storage.NewStore does, but
// with o's transformer and the default decoder unwrapped.
func newBareEtcd3(c *kubernetes.Client, o sqlkubestorage.Options) (storage.Interface, error) {
	leases := etcd3.NewDefaultLeaseManagerConfig()
	leases.ReuseDurationSeconds = o.LeaseReuseDurationSeconds
	versioner := storage.APIObjectVersioner{}
	return etcd3.New(c, o.Compactor, o.Codec, o.NewFunc, o.NewListFunc, o.Prefix, o.ResourcePrefix, o.GroupResource,
		o.Transformer, leases, etcd3.NewDefaultDecoder(o.Codec, versioner), versioner)
}

// connect returns a client reaching srv by w, closed when t ends.
func connect(t *testing.T, srv *etcdshim.Server, w way) *kubernetes.Client {
	t.Helper()
	var client *kubernetes.Client
	switch w {
	case inProcess:
		client = sqlkubestorage.Local(srv)
	case overGRPC:
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		go func() { _ = srv.Serve(lis) }()
		client, err = sqlkubestorage.Remote(sqlkubestorage.RemoteConfig{Endpoints: []string{lis.Addr().String()}})
		if err != nil {
			t.Fatalf("etcd client: %v", err)
		}
	default:
		t.Fatalf("unknown way %q", w)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// run runs fn on a fresh env for every way and backend, all in parallel
// unless serially. Like upstream, the tests get a background context: they
// cancel what they start themselves.
func run(t *testing.T, fn func(ctx context.Context, t *testing.T, e *env), opts ...setupOption) {
	t.Helper()
	var o setupOptions
	for _, opt := range opts {
		opt(&o)
	}
	for _, w := range ways {
		t.Run(string(w), func(t *testing.T) {
			if !o.serial {
				t.Parallel()
			}
			sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
				if !o.serial {
					t.Parallel()
				}
				fn(context.Background(), t, newEnv(t, b, w, opts...))
			})
		})
	}
}

// testStore is the store under test with the hooks the suite uses to swap
// its value transformer (storagetesting.InterfaceWithPrefixTransformer and
// InterfaceWithTransformerOverride).
type testStore struct {
	storage.Interface
	// etcd is the etcd3 store itself, under any wrapping of Interface.
	etcd        storage.Interface
	transformer *swappableTransformer
}

// UpdatePrefixTransformer hands the modifier a copy of the prefix
// transformer and uses the result until the returned func is called.
func (s *testStore) UpdatePrefixTransformer(modify storagetesting.PrefixTransformerModifier) func() {
	modified := *s.transformer.base
	return s.transformer.swap(modify(&modified))
}

// UpdateTransformer hands the modifier the transformer in use and uses the
// result until the returned func is called.
func (s *testStore) UpdateTransformer(modify storagetesting.TransformerModifier) func() {
	return s.transformer.swap(modify(s.transformer.current()))
}

// EnableResourceSizeEstimation turns on the etcd3 store's object size
// estimates (at most once per store).
func (s *testStore) EnableResourceSizeEstimation(keys storage.KeysFunc) error {
	return s.etcd.(interface {
		EnableResourceSizeEstimation(storage.KeysFunc) error
	}).EnableResourceSizeEstimation(keys)
}

var (
	_ storagetesting.InterfaceWithPrefixTransformer   = (*testStore)(nil)
	_ storagetesting.InterfaceWithTransformerOverride = (*testStore)(nil)
)

// swappableTransformer is the transformer the store and its watcher share;
// tests replace what it delegates to for a while.
type swappableTransformer struct {
	base *storagetesting.PrefixTransformer

	mu  sync.RWMutex
	cur value.Transformer
}

func newSwappableTransformer(base *storagetesting.PrefixTransformer) *swappableTransformer {
	return &swappableTransformer{base: base, cur: base}
}

func (s *swappableTransformer) current() value.Transformer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur
}

// swap delegates to t until the returned func restores what it delegated
// to before.
func (s *swappableTransformer) swap(t value.Transformer) (restore func()) {
	s.mu.Lock()
	prev := s.cur
	s.cur = t
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.cur = prev
		s.mu.Unlock()
	}
}

func (s *swappableTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	return s.current().TransformFromStorage(ctx, data, dataCtx)
}

func (s *swappableTransformer) TransformToStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, error) {
	return s.current().TransformToStorage(ctx, data, dataCtx)
}

// corruptedTransformer writes normally but cannot read anything back.
type corruptedTransformer struct {
	value.Transformer
}

func (corruptedTransformer) TransformFromStorage(context.Context, []byte, value.Context) ([]byte, bool, error) {
	return nil, true, errors.New("bits flipped")
}

// setTransformFailing is the suite's switch for unreadable stored values:
// while on, every read fails to transform.
func (e *env) setTransformFailing() func(bool) {
	var restore func()
	return func(fail bool) {
		switch {
		case fail && restore == nil:
			restore = e.transformer.swap(corruptedTransformer{e.transformer.base})
		case !fail && restore != nil:
			restore()
			restore = nil
		}
	}
}

// failingCodec is the store's codec; it decodes nothing while its fail
// switch (setFailing) is on.
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

// corruptObjectError returns the error the etcd3 store's corrupt object
// handling makes of a value it cannot transform: the error the suite injects
// to make stored objects look corrupt (upstream builds etcd3's unexported
// type directly).
func corruptObjectError(t *testing.T) error {
	t.Helper()
	_, _, err := etcd3.WithCorruptObjErrorHandlingTransformer(corruptedTransformer{}).
		TransformFromStorage(context.Background(), nil, value.DefaultContext(nil))
	if err == nil {
		t.Fatal("the corrupt object handling transformer read a corrupt value")
	}
	return err
}

// checkStorageInvariants checks what the store wrote under key: present,
// prefixed by the transformer, and without resourceVersion or selfLink.
func (e *env) checkStorageInvariants() storagetesting.KeyValidation {
	return func(ctx context.Context, t *testing.T, key string) {
		resp, err := e.client.KV.Get(ctx, key)
		if err != nil {
			t.Fatalf("etcd Get %q: %v", key, err)
		}
		if len(resp.Kvs) == 0 {
			t.Fatalf("no value stored under %q", key)
		}
		data := resp.Kvs[0].Value
		if len(data) < len(valuePrefix) || string(data[:len(valuePrefix)]) != valuePrefix {
			t.Fatalf("value under %q lacks the transformer prefix %q: %q", key, valuePrefix, data)
		}
		decoded, err := runtime.Decode(e.codec, data[len(valuePrefix):])
		if err != nil {
			t.Fatalf("decode value under %q: %v\n%s", key, err, data)
		}
		pod := decoded.(*example.Pod)
		if pod.ResourceVersion != "" {
			t.Errorf("stored object has resourceVersion %q, want none", pod.ResourceVersion)
		}
		if pod.SelfLink != "" {
			t.Errorf("stored object has selfLink %q, want none", pod.SelfLink)
		}
	}
}

// checkStorageCallsInvariants checks how many objects the transformer read
// and how many reads (Gets and RangeStreams) reached etcd for a paged list:
// the store doubles its page size (up to maxListLimit) while pages come back
// short.
func (e *env) checkStorageCallsInvariants() storagetesting.CallsValidation {
	return func(t *testing.T, pageSize, estimatedProcessedObjects uint64) {
		if reads := e.transformer.base.GetReadsAndReset(); reads != estimatedProcessedObjects {
			t.Errorf("transformer reads = %d, want %d", reads, estimatedProcessedObjects)
		}
		wantGets := uint64(1)
		if pageSize != 0 {
			limit := pageSize
			for sum := uint64(1); sum < estimatedProcessedObjects; {
				limit = min(limit*2, maxListLimit)
				sum += limit
				wantGets++
			}
		}
		if reads := e.kv.GetReadsAndReset() + e.kv.GetStreamReadsAndReset(); reads != wantGets {
			t.Fatalf("etcd reads = %d, want %d", reads, wantGets)
		}
	}
}

// learnRangeStreamSupport lists once, before the lists a test counts, and
// forgets the reads. The etcd3 store tries RangeStream first when the
// EtcdRangeStream gate is on; sqlkube's server answers Unimplemented, which
// the store remembers process-wide (for 10 minutes) and pages from then on.
// Upstream's etcd serves RangeStream, so its counts hold no such probe.
func (e *env) learnRangeStreamSupport(ctx context.Context, t *testing.T) {
	t.Helper()
	opts := storage.ListOptions{Predicate: storage.Everything, Recursive: true}
	if err := e.store.GetList(ctx, "/pods/", opts, &example.PodList{}); err != nil {
		t.Fatalf("list: %v", err)
	}
	e.kv.GetReadsAndReset()
	e.kv.GetStreamReadsAndReset()
	e.transformer.base.GetReadsAndReset()
}

// resetFeatureSupportChecker gives the apiserver's process-wide record of
// what etcd supports a fresh start for the rest of t, as upstream does for
// its RangeStream tests: whether RangeStream is served is learnt anew.
// Tests using it must not run in parallel with others.
func resetFeatureSupportChecker(t *testing.T) {
	t.Helper()
	orig := etcdfeature.DefaultFeatureSupportChecker
	etcdfeature.DefaultFeatureSupportChecker = etcdfeature.NewDefaultFeatureSupportChecker()
	t.Cleanup(func() { etcdfeature.DefaultFeatureSupportChecker = orig })
}

// compaction compacts the sqlkube etcd history up to resourceVersion the
// way the apiserver's compactor does: record the revision in
// compact_rev_key by compare-and-swap on its version, then Compact. When
// the store follows compact_rev_key (ListFromCacheSnapshot), it waits for
// the store to see the new compaction.
func (e *env) compaction() storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.client.Client.Get(ctx, compactRevKey)
		if err != nil {
			t.Fatalf("read %s: %v", compactRevKey, err)
		}
		var version int64
		if len(resp.Kvs) > 0 {
			version = resp.Kvs[0].Version
		}
		_, _, compacted, err := etcd3.Compact(ctx, e.client.Client, version, int64(rv))
		if err != nil {
			t.Fatalf("compact to %d: %v", rv, err)
		}
		if compacted != int64(rv) {
			t.Fatalf("compact to %d: compacted to %d instead", rv, compacted)
		}
		if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
			return
		}
		deadline := time.Now().Add(compactionObserveTimeout)
		for e.store.CompactRevision() < int64(rv) {
			if time.Now().After(deadline) {
				t.Fatalf("store did not observe compaction to %d within %v (sees %d)", rv, compactionObserveTimeout, e.store.CompactRevision())
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// increaseRV moves the etcd revision forward with a write outside the
// store's keys and returns the revision of the write.
func (e *env) increaseRV() storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := e.client.KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("put increaseRV: %v", err)
		}
		return resp.Header.Revision
	}
}

// podKeys lists the keys under /pods/, as the etcd3 store's own key
// function does for its object count statistics.
func (e *env) podKeys(ctx context.Context) ([]string, error) {
	resp, err := e.client.KV.Get(ctx, "/pods/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys, nil
}
