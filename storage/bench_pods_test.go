package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/kubernetes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apiserver/pkg/features"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/sqlkube/sqlkube/internal/teststore"
	"github.com/sqlkube/sqlkube/storage"
)

// The pod fixture of the storage benchmarks: pods shaped like a busy
// cluster's (labels, owner, two containers, probes, a projected token
// volume, status with conditions), spread over benchNamespaces namespaces
// and benchNodes nodes, stored as kube-apiserver stores them: protobuf under
// /registry/pods/<namespace>/<name>.
const (
	benchNamespaces = 20
	benchNodes      = 100
	podsPrefix      = "/pods"
	// seqAnnotation numbers the writes of the fan-out benchmark.
	seqAnnotation = "bench.sqlkube.io/seq"
)

func podNamespace(i int) string { return fmt.Sprintf("ns-%02d", i%benchNamespaces) }
func podNode(i int) string      { return fmt.Sprintf("node-%d", i%benchNodes) }

// podKeyFunc is the registry's NamespaceKeyFunc for pods.
func podKeyFunc(obj runtime.Object) (string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return "", fmt.Errorf("not a pod: %T", obj)
	}
	if pod.Namespace == "" || pod.Name == "" {
		return "", errors.New("pod without namespace or name")
	}
	return podsPrefix + "/" + pod.Namespace + "/" + pod.Name, nil
}

// podGetAttrs is kube-apiserver's pod.GetAttrs (pkg/registry/core/pod):
// labels plus the selectable fields of a pod.
func podGetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	hostNetwork := false
	if pod.Spec.SecurityContext != nil {
		hostNetwork = pod.Spec.HostNetwork
	}
	podIP := ""
	if len(pod.Status.PodIPs) > 0 {
		podIP = pod.Status.PodIPs[0].IP
	}
	return labels.Set(pod.Labels), fields.Set{
		"metadata.name":            pod.Name,
		"metadata.namespace":       pod.Namespace,
		"spec.nodeName":            pod.Spec.NodeName,
		"spec.restartPolicy":       string(pod.Spec.RestartPolicy),
		"spec.schedulerName":       pod.Spec.SchedulerName,
		"spec.serviceAccountName":  pod.Spec.ServiceAccountName,
		"spec.hostNetwork":         strconv.FormatBool(hostNetwork),
		"status.phase":             string(pod.Status.Phase),
		"status.podIP":             podIP,
		"status.nominatedNodeName": pod.Status.NominatedNodeName,
	}, nil
}

// podPredicate is kube-apiserver's pod.MatchPod: the selectors plus the
// fields the watch cache may answer from an index.
func podPredicate(label labels.Selector, field fields.Selector) k8sstorage.SelectionPredicate {
	return k8sstorage.SelectionPredicate{
		Label:       label,
		Field:       field,
		GetAttrs:    podGetAttrs,
		IndexFields: []string{"spec.nodeName", "metadata.namespace"},
	}
}

// podNodeName is kube-apiserver's NodeNameTriggerFunc (watchers by node).
func podNodeName(obj runtime.Object) string { return obj.(*v1.Pod).Spec.NodeName }

// podIndexers are kube-apiserver's pod Indexers (with StorageNamespaceIndex).
func podIndexers() *cache.Indexers {
	return &cache.Indexers{
		k8sstorage.FieldIndex("spec.nodeName"): func(obj any) ([]string, error) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return nil, fmt.Errorf("not a pod: %T", obj)
			}
			return []string{pod.Spec.NodeName}, nil
		},
		k8sstorage.FieldIndex("metadata.namespace"): func(obj any) ([]string, error) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return nil, fmt.Errorf("not a pod: %T", obj)
			}
			return []string{pod.Namespace}, nil
		},
	}
}

// podCodec encodes v1 pods as protobuf, kube-apiserver's storage encoding
// for built-in types.
func podCodec() runtime.Codec {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		panic("no protobuf serializer")
	}
	gv := v1.SchemeGroupVersion
	return scheme.Codecs.CodecForVersions(info.Serializer, info.Serializer, gv, gv)
}

func podOptions() storage.Options {
	return storage.Options{
		Codec:          podCodec(),
		NewFunc:        func() runtime.Object { return &v1.Pod{} },
		NewListFunc:    func() runtime.Object { return &v1.PodList{} },
		ResourcePrefix: podsPrefix,
		GroupResource:  schema.GroupResource{Resource: "pods"},
	}
}

// newBenchPod returns pod number i, as a ReplicaSet's pod scheduled and
// running on its node.
func newBenchPod(i int) *v1.Pod {
	app := fmt.Sprintf("app-%03d", i%200)
	hash := fmt.Sprintf("%08x", uint32(i/50)*2654435761)
	created := metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second))
	ip := fmt.Sprintf("10.%d.%d.%d", 64+i/65536, (i/256)%256, i%256)
	isTrue := true
	grace := int64(30)
	tokenExpiry := int64(3607)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("%s-%s-%05d", app, hash, i),
			Namespace:         podNamespace(i),
			UID:               types.UID(fmt.Sprintf("6f1c2b9e-4d3a-4f2b-9c1d-%012d", i)),
			CreationTimestamp: created,
			Labels: map[string]string{
				"app.kubernetes.io/name":      app,
				"app.kubernetes.io/component": "backend",
				"app.kubernetes.io/part-of":   "shop",
				"pod-template-hash":           hash,
				"tier":                        []string{"web", "api", "worker"}[i%3],
			},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z",
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash,
				UID: types.UID(fmt.Sprintf("0a7e3c51-8b2d-4e6f-a1c3-%012d", i/50)), Controller: &isTrue, BlockOwnerDeletion: &isTrue,
			}},
		},
		Spec: v1.PodSpec{
			Containers: []v1.Container{
				{
					Name:    "app",
					Image:   "registry.example.com/shop/" + app + ":v1.42.7",
					Command: []string{"/app/server"},
					Args:    []string{"--listen=:8080", "--metrics=:9090", "--log-level=info"},
					Ports: []v1.ContainerPort{
						{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP},
						{Name: "metrics", ContainerPort: 9090, Protocol: v1.ProtocolTCP},
					},
					Env: []v1.EnvVar{
						{Name: "GOMAXPROCS", Value: "2"},
						{Name: "DATABASE_URL", Value: "postgres://shop@db.shop.svc:5432/shop"},
						{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
					},
					Resources: v1.ResourceRequirements{
						Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("256Mi")},
						Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")},
					},
					VolumeMounts: []v1.VolumeMount{
						{Name: "config", MountPath: "/etc/app", ReadOnly: true},
						{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
					},
					ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080), Scheme: v1.URISchemeHTTP}},
						PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
					LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(8080), Scheme: v1.URISchemeHTTP}},
						InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
					TerminationMessagePath:   "/dev/termination-log",
					TerminationMessagePolicy: v1.TerminationMessageReadFile,
					ImagePullPolicy:          v1.PullIfNotPresent,
				},
				{
					Name:                     "proxy",
					Image:                    "registry.example.com/mesh/proxy:1.22.3",
					Args:                     []string{"proxy", "sidecar", "--concurrency=2"},
					Resources:                v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("64Mi")}},
					TerminationMessagePath:   "/dev/termination-log",
					TerminationMessagePolicy: v1.TerminationMessageReadFile,
					ImagePullPolicy:          v1.PullIfNotPresent,
				},
			},
			Volumes: []v1.Volume{
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: app + "-config"}}}},
				{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: &tokenExpiry, Path: "token"}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
			},
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     v1.DNSClusterFirst,
			ServiceAccountName:            "shop",
			NodeName:                      podNode(i),
			SecurityContext:               &v1.PodSecurityContext{},
			SchedulerName:                 "default-scheduler",
			Tolerations: []v1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptrInt64(300)},
				{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptrInt64(300)},
			},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning,
			Conditions: []v1.PodCondition{
				{Type: "PodReadyToStartContainers", Status: v1.ConditionTrue, LastTransitionTime: created},
				{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: created},
				{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: created},
				{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: created},
				{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: created},
			},
			HostIP:    fmt.Sprintf("192.168.%d.%d", (i%benchNodes)/250, (i%benchNodes)%250+1),
			PodIP:     ip,
			PodIPs:    []v1.PodIP{{IP: ip}},
			StartTime: &created,
			QOSClass:  v1.PodQOSBurstable,
			ContainerStatuses: []v1.ContainerStatus{
				containerStatus("app", "registry.example.com/shop/"+app+":v1.42.7", i, created),
				containerStatus("proxy", "registry.example.com/mesh/proxy:1.22.3", i, created),
			},
		},
	}
}

func containerStatus(name, image string, i int, started metav1.Time) v1.ContainerStatus {
	return v1.ContainerStatus{
		Name:         name,
		Ready:        true,
		Started:      ptrBool(true),
		Image:        image,
		ImageID:      image + "@sha256:" + fmt.Sprintf("%064x", len(image)*7919+i%7),
		ContainerID:  fmt.Sprintf("containerd://%064x", i*31+len(name)),
		State:        v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}},
		RestartCount: 0,
	}
}

// benchEnv is one benchmark's world: a SQLite database in a temp dir,
// sqlkube's etcd API on it, the apiserver's etcd3 store for pods over the
// in-process client, and (newCacher) watch caches in front of the store.
type benchEnv struct {
	client *kubernetes.Client
	opts   storage.Options
	store  k8sstorage.Interface
	// keys are the pods' storage keys, pod i at keys[i].
	keys []string
	// encodedBytes is the total size of the pods as stored.
	encodedBytes int64
}

// newBenchEnv opens the database and the store and creates n pods in it.
// Everything is torn down when tb ends.
func newBenchEnv(tb testing.TB, n int) *benchEnv {
	tb.Helper()
	// A background consistency check lists everything from both the cache
	// and the store every 5-7.5 minutes; keep it out of the measurements.
	featuregatetesting.SetFeatureGateDuringTest(tb, utilfeature.DefaultFeatureGate, features.DetectCacheInconsistency, false)
	client := teststore.Local(tb, tb.TempDir())
	waitConsistentListFromCache(tb)

	compactor := storage.NewCompactor(client, 0)
	tb.Cleanup(compactor.Stop)
	e := &benchEnv{client: client, opts: podOptions()}
	e.opts.Compactor = compactor
	e.store, _ = e.newStore(tb)
	e.createPods(tb, n)
	return e
}

// newStore returns a new etcd3 store for pods over the env's client and a
// function that closes it; it is closed when tb ends if not before.
func (e *benchEnv) newStore(tb testing.TB) (k8sstorage.Interface, func()) {
	tb.Helper()
	store, err := storage.NewStore(e.client, e.opts)
	if err != nil {
		tb.Fatal(err)
	}
	closeStore := func() {}
	if c, ok := store.(interface{ Close() }); ok {
		closeStore = sync.OnceFunc(c.Close)
	}
	tb.Cleanup(closeStore)
	return store, closeStore
}

// createPods creates pods 0..n-1 with a few concurrent writers (the store
// batches concurrent writes into one transaction).
func (e *benchEnv) createPods(tb testing.TB, n int) {
	tb.Helper()
	ctx := context.Background()
	const writers = 16
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		size  int64
	)
	codec := podCodec()
	e.keys = make([]string, n)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				pod := newBenchPod(i)
				key, _ := podKeyFunc(pod)
				e.keys[i] = key
				data, err := runtime.Encode(codec, pod)
				if err == nil {
					err = e.store.Create(ctx, key, pod, &v1.Pod{}, 0)
				}
				mu.Lock()
				size += int64(len(data))
				if err != nil && first == nil {
					first = fmt.Errorf("create pod %d: %w", i, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
	e.encodedBytes = size
}

// newCacher builds a watch cache over the env's store; see newPodCacher.
func (e *benchEnv) newCacher(tb testing.TB) *storage.Cached {
	tb.Helper()
	return newPodCacher(tb, e.store, 0)
}

// newPodCacher builds a watch cache over store as kube-apiserver does for
// pods (the node trigger, namespace and node indexes) through
// storage.NewCached (the cache delegator, which decides between cache and
// store as kube-apiserver's registry sees it, and decoupled watches with
// watchBuffer events of slack, 0 for the default), and waits until it is
// filled. It stops when tb ends unless stopped earlier.
func newPodCacher(tb testing.TB, store k8sstorage.Interface, watchBuffer int) *storage.Cached {
	tb.Helper()
	c, err := storage.NewCached(storage.CacherOptions{
		Store:        store,
		Options:      podOptions(),
		GetAttrs:     podGetAttrs,
		KeyFunc:      podKeyFunc,
		IndexerFuncs: k8sstorage.IndexerFuncs{"spec.nodeName": podNodeName},
		Indexers:     podIndexers(),
		WatchBuffer:  watchBuffer,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	deadline := time.Now().Add(time.Minute)
	for !c.Ready() {
		if time.Now().After(deadline) {
			tb.Fatal("watch cache not ready after a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

// waitConsistentListFromCache waits until the apiserver will serve
// consistent lists (resourceVersion "") from the watch cache: only once its
// process-wide feature checker has found an etcd that supports progress
// requests (storage.Local starts that check) - until then they go to the
// store.
func waitConsistentListFromCache(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !etcdfeature.DefaultFeatureSupportChecker.Supports(k8sstorage.RequestWatchProgress) {
		if time.Now().After(deadline) {
			tb.Fatal("consistent lists are not served from the watch cache: the feature checker found no progress request support")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ptrInt64(v int64) *int64 { return &v }
func ptrBool(v bool) *bool    { return &v }
