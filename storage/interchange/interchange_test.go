package interchange

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/storage"
)

func init() {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
}

// protobufMagic opens every value kube-apiserver stores in protobuf.
var protobufMagic = []byte("k8s\x00")

// eventTimeout bounds the wait for a watch event.
const eventTimeout = 15 * time.Second

// storageCodec encodes and decodes core/v1 objects as kube-apiserver's
// storage does: serverstorage.NewStorageCodec with the default
// --storage-media-type, protobuf, over the scheme of the built-in types.
// kube-apiserver decodes to its internal version; without the internal
// types here, the memory version is v1.
func storageCodec(t *testing.T) runtime.Codec {
	t.Helper()
	codec, _, err := serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType:  runtime.ContentTypeProtobuf,
		StorageSerializer: serializer.NewCodecFactory(clientgoscheme.Scheme),
		StorageVersion:    corev1.SchemeGroupVersion,
		MemoryVersion:     corev1.SchemeGroupVersion,
	})
	if err != nil {
		t.Fatalf("storage codec: %v", err)
	}
	return codec
}

// resource is one kind of object both storages keep.
type resource struct {
	prefix               string // folder under /registry, as kube-apiserver names it
	group                schema.GroupResource
	newFunc, newListFunc func() runtime.Object
}

var (
	pods = resource{"/pods", schema.GroupResource{Resource: "pods"},
		func() runtime.Object { return &corev1.Pod{} }, func() runtime.Object { return &corev1.PodList{} }}
	configMaps = resource{"/configmaps", schema.GroupResource{Resource: "configmaps"},
		func() runtime.Object { return &corev1.ConfigMap{} }, func() runtime.Object { return &corev1.ConfigMapList{} }}
)

// env is one `sqlkube etcd` server on a fresh database, with sqlkube's
// storage on it in-process and kube-apiserver's (the upstream etcd3 store)
// over gRPC.
type env struct {
	codec runtime.Codec
	raw   *clientv3.Client // over gRPC, for the stored bytes
	// sqlkube and upstream hold each side's store by resource prefix.
	sqlkube  map[string]k8sstorage.Interface
	upstream map[string]k8sstorage.Interface
}

func newEnv(t *testing.T, b sqltest.Backend) *env {
	t.Helper()
	ctx := context.Background()
	be, err := sqlstore.Open(ctx, sqlstore.Options{DSN: b.NewDSN(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("open %s store: %v", b.Name, err)
	}
	t.Cleanup(func() { _ = be.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop()})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop(5 * time.Second)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	e := &env{codec: storageCodec(t), sqlkube: map[string]k8sstorage.Interface{}, upstream: map[string]k8sstorage.Interface{}}

	// sqlkube's storage, in-process.
	local := storage.Local(srv)
	t.Cleanup(func() { _ = local.Close() })
	compactor := storage.NewCompactor(local, 0)
	t.Cleanup(compactor.Stop)

	// kube-apiserver's storage, as its storage factory builds it, over
	// an etcd client that knows nothing of sqlkube.
	remote, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{lis.Addr().String()},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = remote.Close() })
	e.raw = remote.Client
	upstreamCompactor := etcd3.NewCompactor(remote.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(upstreamCompactor.Stop)
	versioner := k8sstorage.APIObjectVersioner{}

	for _, r := range []resource{pods, configMaps} {
		s, err := storage.NewStore(local, storage.Options{
			Codec: e.codec, NewFunc: r.newFunc, NewListFunc: r.newListFunc,
			ResourcePrefix: r.prefix, GroupResource: r.group, Compactor: compactor,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.(interface{ Close() }).Close)
		e.sqlkube[r.prefix] = s

		u, err := etcd3.New(remote, upstreamCompactor, e.codec, r.newFunc, r.newListFunc, "/registry", r.prefix, r.group,
			identity.NewEncryptCheckTransformer(), etcd3.NewDefaultLeaseManagerConfig(), etcd3.NewDefaultDecoder(e.codec, versioner), versioner)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(u.Close)
		e.upstream[r.prefix] = u
	}
	return e
}

// created is when the test objects were made (protobuf keeps seconds).
var created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func newPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), CreationTimestamp: created,
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"sqlkube.io/note": "ünïcode and \x00 bytes"},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1.27",
				Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
			}},
			RestartPolicy: corev1.RestartPolicyAlways,
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func newConfigMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), CreationTimestamp: created},
		Data:       map[string]string{"config.yaml": "a: 1\n"},
		BinaryData: map[string][]byte{"blob": {0, 1, 2, 0xff}},
	}
}

// key is the object's key in the storage interface; kube-apiserver keeps
// it under /registry.
func key(r resource, ns, name string) string { return r.prefix + "/" + ns + "/" + name }

// checkStored checks the bytes under etcdKey: kube-apiserver's protobuf
// envelope holding want's kind and want without its resourceVersion.
func (e *env) checkStored(ctx context.Context, t *testing.T, etcdKey string, want runtime.Object) {
	t.Helper()
	resp, err := e.raw.Get(ctx, etcdKey)
	if err != nil {
		t.Fatalf("etcd Get %s: %v", etcdKey, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd Get %s: %d values, want 1", etcdKey, len(resp.Kvs))
	}
	data := resp.Kvs[0].Value
	if !bytes.HasPrefix(data, protobufMagic) {
		t.Fatalf("value under %s starts %q, want the protobuf envelope %q", etcdKey, data[:min(len(data), 8)], protobufMagic)
	}
	got, gvk, err := e.codec.Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode value under %s: %v", etcdKey, err)
	}
	wantGVK, _, err := clientgoscheme.Scheme.ObjectKinds(want)
	if err != nil || *gvk != wantGVK[0] {
		t.Errorf("value under %s is a %v, want %v (%v)", etcdKey, gvk, wantGVK, err)
	}
	if rv := mustAccessor(t, got).GetResourceVersion(); rv != "" {
		t.Errorf("value under %s stores resourceVersion %q, want none", etcdKey, rv)
	}
	want = want.DeepCopyObject()
	mustAccessor(t, want).SetResourceVersion("")
	checkEqual(t, "stored object", got, want)
}

func mustAccessor(t *testing.T, obj runtime.Object) metav1.Object {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func checkEqual(t *testing.T, what string, got, want runtime.Object) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s differs (-want +got):\n%s", what, cmp.Diff(want, got))
	}
}

// nextEvent returns w's next event, failing the test after eventTimeout.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch ended")
		}
		return ev
	case <-time.After(eventTimeout):
		t.Fatalf("no watch event within %v", eventTimeout)
	}
	return watch.Event{}
}

func checkEvent(t *testing.T, got watch.Event, wantType watch.EventType, want runtime.Object) {
	t.Helper()
	if got.Type != wantType {
		t.Fatalf("event %s %v, want %s", got.Type, got.Object, wantType)
	}
	checkEqual(t, string(wantType)+" event object", got.Object, want)
}

// TestSqlkubeWritesUpstreamReads writes through sqlkube's in-process
// storage and reads with kube-apiserver's etcd3 store over gRPC.
func TestSqlkubeWritesUpstreamReads(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()

		pod := &corev1.Pod{}
		if err := e.sqlkube[pods.prefix].Create(ctx, key(pods, "default", "web-0"), newPod("default", "web-0"), pod, 0); err != nil {
			t.Fatalf("sqlkube Create pod: %v", err)
		}
		cm := &corev1.ConfigMap{}
		if err := e.sqlkube[configMaps.prefix].Create(ctx, key(configMaps, "kube-system", "settings"), newConfigMap("kube-system", "settings"), cm, 0); err != nil {
			t.Fatalf("sqlkube Create configmap: %v", err)
		}
		e.checkStored(ctx, t, "/registry/pods/default/web-0", pod)
		e.checkStored(ctx, t, "/registry/configmaps/kube-system/settings", cm)

		gotPod := &corev1.Pod{}
		if err := e.upstream[pods.prefix].Get(ctx, key(pods, "default", "web-0"), k8sstorage.GetOptions{}, gotPod); err != nil {
			t.Fatalf("upstream Get pod: %v", err)
		}
		checkEqual(t, "pod read by upstream", gotPod, pod)
		gotCM := &corev1.ConfigMap{}
		if err := e.upstream[configMaps.prefix].Get(ctx, key(configMaps, "kube-system", "settings"), k8sstorage.GetOptions{}, gotCM); err != nil {
			t.Fatalf("upstream Get configmap: %v", err)
		}
		checkEqual(t, "configmap read by upstream", gotCM, cm)

		// An update through sqlkube, listed by upstream.
		updated := &corev1.Pod{}
		err := e.sqlkube[pods.prefix].GuaranteedUpdate(ctx, key(pods, "default", "web-0"), updated, false, nil,
			k8sstorage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
				p := obj.(*corev1.Pod)
				p.Status.Phase = corev1.PodRunning
				p.Status.PodIP = "10.0.0.7"
				return p, nil
			}), nil)
		if err != nil {
			t.Fatalf("sqlkube GuaranteedUpdate: %v", err)
		}
		e.checkStored(ctx, t, "/registry/pods/default/web-0", updated)
		list := &corev1.PodList{}
		if err := e.upstream[pods.prefix].GetList(ctx, pods.prefix, k8sstorage.ListOptions{Recursive: true, Predicate: k8sstorage.Everything}, list); err != nil {
			t.Fatalf("upstream GetList: %v", err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("upstream lists %d pods, want 1", len(list.Items))
		}
		checkEqual(t, "updated pod listed by upstream", &list.Items[0], updated)
		if list.ResourceVersion != updated.ResourceVersion {
			t.Errorf("list resourceVersion %s, want the update's %s", list.ResourceVersion, updated.ResourceVersion)
		}
	})
}

// TestUpstreamWritesSqlkubeReads writes with kube-apiserver's etcd3 store
// over gRPC and reads, lists and watches through sqlkube's in-process
// storage, the watch starting from a revision before the writes.
func TestUpstreamWritesSqlkubeReads(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()

		// The revision before upstream's writes.
		before := &corev1.ConfigMap{}
		if err := e.sqlkube[configMaps.prefix].Create(ctx, key(configMaps, "default", "before"), newConfigMap("default", "before"), before, 0); err != nil {
			t.Fatalf("sqlkube Create: %v", err)
		}

		pod := &corev1.Pod{}
		if err := e.upstream[pods.prefix].Create(ctx, key(pods, "default", "web-1"), newPod("default", "web-1"), pod, 0); err != nil {
			t.Fatalf("upstream Create pod: %v", err)
		}
		cm := &corev1.ConfigMap{}
		if err := e.upstream[configMaps.prefix].Create(ctx, key(configMaps, "kube-system", "settings"), newConfigMap("kube-system", "settings"), cm, 0); err != nil {
			t.Fatalf("upstream Create configmap: %v", err)
		}
		e.checkStored(ctx, t, "/registry/pods/default/web-1", pod)
		e.checkStored(ctx, t, "/registry/configmaps/kube-system/settings", cm)

		gotPod := &corev1.Pod{}
		if err := e.sqlkube[pods.prefix].Get(ctx, key(pods, "default", "web-1"), k8sstorage.GetOptions{}, gotPod); err != nil {
			t.Fatalf("sqlkube Get pod: %v", err)
		}
		checkEqual(t, "pod read by sqlkube", gotPod, pod)
		gotCM := &corev1.ConfigMap{}
		if err := e.sqlkube[configMaps.prefix].Get(ctx, key(configMaps, "kube-system", "settings"), k8sstorage.GetOptions{}, gotCM); err != nil {
			t.Fatalf("sqlkube Get configmap: %v", err)
		}
		checkEqual(t, "configmap read by sqlkube", gotCM, cm)

		updated := &corev1.Pod{}
		err := e.upstream[pods.prefix].GuaranteedUpdate(ctx, key(pods, "default", "web-1"), updated, false, nil,
			k8sstorage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
				p := obj.(*corev1.Pod)
				p.Status.Phase = corev1.PodRunning
				return p, nil
			}), nil)
		if err != nil {
			t.Fatalf("upstream GuaranteedUpdate: %v", err)
		}
		list := &corev1.PodList{}
		if err := e.sqlkube[pods.prefix].GetList(ctx, pods.prefix, k8sstorage.ListOptions{Recursive: true, Predicate: k8sstorage.Everything}, list); err != nil {
			t.Fatalf("sqlkube GetList: %v", err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("sqlkube lists %d pods, want 1", len(list.Items))
		}
		checkEqual(t, "updated pod listed by sqlkube", &list.Items[0], updated)

		// A watch from before the writes replays them from history, then
		// sees upstream's delete as it happens.
		w, err := e.sqlkube[pods.prefix].Watch(ctx, pods.prefix, k8sstorage.ListOptions{
			ResourceVersion: before.ResourceVersion, Recursive: true, Predicate: k8sstorage.Everything,
		})
		if err != nil {
			t.Fatalf("sqlkube Watch: %v", err)
		}
		defer w.Stop()
		checkEvent(t, nextEvent(t, w), watch.Added, pod)
		checkEvent(t, nextEvent(t, w), watch.Modified, updated)

		deleted := &corev1.Pod{}
		if err := e.upstream[pods.prefix].Delete(ctx, key(pods, "default", "web-1"), deleted, nil, k8sstorage.ValidateAllObjectFunc, nil, k8sstorage.DeleteOptions{}); err != nil {
			t.Fatalf("upstream Delete: %v", err)
		}
		checkEvent(t, nextEvent(t, w), watch.Deleted, deleted)
		if err := e.sqlkube[pods.prefix].Get(ctx, key(pods, "default", "web-1"), k8sstorage.GetOptions{}, &corev1.Pod{}); !k8sstorage.IsNotFound(err) {
			t.Errorf("sqlkube Get after upstream's delete: %v, want not found", err)
		}
	})
}
