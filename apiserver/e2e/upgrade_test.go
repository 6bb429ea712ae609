package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/internal/testbin"
)

// upgradeWait bounds each wait of the upgrade test.
const upgradeWait = 60 * time.Second

// oldStorageVersions are the versions v1.34.2 stores resources in that
// kube-apiserver 1.37 stores in others, and the fixture's custom
// resources: the fixture must hold objects stored so, and they must read.
var oldStorageVersions = map[string]string{
	"/registry/deviceclasses/":              "resource.k8s.io/v1beta2",
	"/registry/resourceclaims/":             "resource.k8s.io/v1beta2",
	"/registry/resourceclaimtemplates/":     "resource.k8s.io/v1beta2",
	"/registry/resourceslices/":             "resource.k8s.io/v1beta2",
	"/registry/volumeattributesclasses/":    "storage.k8s.io/v1beta1",
	"/registry/upgrade.sqlkube.io/widgets/": "upgrade.sqlkube.io/v1alpha1",
}

// TestUpgrade_FromV1342: an existing cluster upgrades in place. The data
// directory of sqlkube's last release on Kubernetes v1.34.2 (commit
// 8dd90df; testdata/upgrade-v1.34.2, made by its make-fixture.sh: two
// simulated nodes and workloads, configuration, RBAC, policies, DRA
// objects stored as resource.k8s.io/v1beta2, volume attributes classes as
// v1beta1, custom resources at the older of two versions) is served by
// this binary with the flags it was made with. It reports this release;
// every object the old server listed is still there with its UID (pods
// and endpoint slices that controllers own may be replaced); the
// fixture's own objects are unchanged but for new defaults, read at the
// version the old server served them in; custom resources read and write
// at both versions; one object of every resource takes a write; the
// workloads run again and their controllers act; the old cluster's
// service allocations, admission policy, limit range and service-account
// token still hold; StorageVersionMigrations rewrite the old objects (the
// widgets' after v1 becomes their storage version) into one version; and
// the log holds no warning or error that would mean lost or unreadable
// data.
func TestUpgrade_FromV1342(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	release, err := testbin.KubernetesVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fixture := unpackFixture(t, dir)
	data := filepath.Join(dir, "data")

	// What the fixture stores in old versions, read from a second copy
	// (opening a datastore migrates it: the server must do that itself).
	scratch := t.TempDir()
	unpackFixture(t, scratch)
	before := storedVersions(t, filepath.Join(scratch, "data"))
	for prefix, v := range oldStorageVersions {
		keys := keysUnder(before, prefix)
		if len(keys) == 0 {
			t.Fatalf("the fixture stores nothing under %s", prefix)
		}
		for _, k := range keys {
			if before[k] != v {
				t.Fatalf("the fixture stores %s as %q, want %q", k, before[k], v)
			}
		}
	}

	s := startCommand(t, data, "server", "--fake-nodes", "2")
	cfg := s.restConfig(t, s.kubeconfig)
	cfg.QPS, cfg.Burst = 200, 400
	// A resource whose objects do not decode answers lists 429 until its
	// watch cache initializes, which it never does: bound every call,
	// retries included.
	cfg.Timeout = 20 * time.Second
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	served := servedResources(t, cs.Discovery())

	t.Run("Version", func(t *testing.T) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != release || release == fixtureRelease {
			t.Errorf("the server reports %s, want %s (the fixture's is %s)", v.GitVersion, release, fixtureRelease)
		}
		waitUpgrade(t, "the simulated nodes Ready at "+release, func(ctx context.Context) (bool, error) {
			for _, name := range []string{"fake-0", "fake-1"} {
				n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil || n.Status.NodeInfo.KubeletVersion != release || !nodeReady(n) {
					return false, err
				}
			}
			return true, nil
		})
	})

	t.Run("EveryObjectKept", func(t *testing.T) {
		listed := listServed(t, ctx, dyn, served)
		kept, stored := 0, 0
		for _, o := range fixture.Objects {
			if o.UID == "" {
				continue // componentstatuses: computed, not stored
			}
			stored++
			if _, ok := served[o.Resource]; !ok {
				t.Errorf("%s: %s is no longer served", o, o.Resource)
				continue
			}
			cur, ok := listed[objectKey(o.Resource, o.Namespace, o.Name)]
			switch {
			case ok && string(cur.GetUID()) == o.UID:
				kept++
			case replaceable(o):
				t.Logf("%s (uid %s) was replaced by its controller %s", o, o.UID, o.Controller)
			case ok:
				t.Errorf("%s has uid %s, want %s", o, cur.GetUID(), o.UID)
			default:
				t.Errorf("%s (uid %s) is gone", o, o.UID)
			}
		}
		t.Logf("%d of the fixture's %d stored objects kept, %d objects of %d resources listed now", kept, stored, len(listed), len(served))
	})

	t.Run("FixtureObjectsUnchanged", func(t *testing.T) {
		n := 0
		for _, o := range fixture.Objects {
			if o.Object == nil || o.Resource == "endpoints" || o.Resource == "endpointslices.discovery.k8s.io" {
				continue // endpoints carry their Service's labels but are the controllers'
			}
			cur, err := dyn.Resource(fixtureGVR(o)).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("%s at %s: %v", o, o.APIVersion, err)
				continue
			}
			want := asJSON(t, o.Object)
			delete(want["metadata"].(map[string]any), "resourceVersion")
			for _, d := range notWithin("", want, asJSON(t, cur.Object)) {
				t.Errorf("%s at %s: %s", o, o.APIVersion, d)
			}
			n++
		}
		if n < 50 {
			t.Errorf("compared %d of the fixture's objects, want its 50 or more", n)
		}
	})

	t.Run("CustomResourcesAtBothVersions", func(t *testing.T) {
		testWidgetsAtBothVersions(t, ctx, dyn, fixture)
	})

	t.Run("WorkloadsRunning", func(t *testing.T) {
		testWorkloadsRunning(t, cs, 2, nil)
		// The controllers, the scheduler and the nodes act on the old
		// objects: a pod of each workload deleted comes back, and web
		// gets a third replica.
		gone := map[types.UID]bool{}
		for ns, selector := range map[string]string{"upgrade-apps": "app in (web, db, agent)", "upgrade-config": "app=legacy"} {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, p := range pods.Items {
				if app := p.Labels["app"]; !seen[app] {
					seen[app] = true
					if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
					gone[p.UID] = true
				}
			}
		}
		if len(gone) != 4 {
			t.Fatalf("deleted %d pods, want one of each of the 4 workloads", len(gone))
		}
		if _, err := cs.AppsV1().Deployments("upgrade-apps").Patch(ctx, "web", types.MergePatchType,
			[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		testWorkloadsRunning(t, cs, 3, gone)
	})

	t.Run("Writable", func(t *testing.T) {
		testOneWritePerResource(t, ctx, dyn, served, fixture)
	})

	t.Run("AllocatorsKept", func(t *testing.T) {
		web, err := cs.CoreV1().Services("upgrade-apps").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, spec := range map[string]corev1.ServiceSpec{
			"same-node-port":  {Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}},
			"same-cluster-ip": {ClusterIP: web.Spec.ClusterIP, Ports: []corev1.ServicePort{{Port: 80}}},
		} {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
			_, err := cs.CoreV1().Services("upgrade-apps").Create(ctx, svc, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Errorf("creating a Service with the fixture's %s: %v, want 422 (already allocated)", name, err)
			}
		}
	})

	t.Run("PoliciesEnforced", func(t *testing.T) {
		// The fixture's ValidatingAdmissionPolicy: ConfigMaps in its
		// namespaces hold fewer than 50 keys.
		cm, err := cs.CoreV1().ConfigMaps("upgrade-apps").Get(ctx, "app-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			cm.Data[fmt.Sprintf("key-%d", i)] = "v"
		}
		if _, err := cs.CoreV1().ConfigMaps("upgrade-apps").Update(ctx, cm, metav1.UpdateOptions{}); err == nil ||
			!strings.Contains(err.Error(), "fewer than 50 keys") {
			t.Errorf("a ConfigMap of 62 keys: %v, want the fixture's policy to deny it", err)
		}
		// The fixture's LimitRange defaults requests in upgrade-config.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "limited"}, Spec: corev1.PodSpec{
			NodeName:   "fake-0",
			Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
		}}
		got, err := cs.CoreV1().Pods("upgrade-config").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cpu := got.Spec.Containers[0].Resources.Requests.Cpu().String(); cpu != "100m" {
			t.Errorf("a pod in upgrade-config requests cpu %s, want the fixture's LimitRange default 100m", cpu)
		}
	})

	t.Run("ServiceAccountToken", func(t *testing.T) {
		// robot-token was signed by the old server; robot may read
		// ConfigMaps in upgrade-apps and widgets, not Secrets.
		secret, err := cs.CoreV1().Secrets("upgrade-apps").Get(ctx, "robot-token", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rcfg := rest.AnonymousClientConfig(cfg)
		rcfg.BearerToken = string(secret.Data["token"])
		robot := kubernetes.NewForConfigOrDie(rcfg)
		if _, err := robot.CoreV1().ConfigMaps("upgrade-apps").Get(ctx, "app-config", metav1.GetOptions{}); err != nil {
			t.Errorf("robot reading a ConfigMap: %v", err)
		}
		if _, err := robot.CoreV1().Secrets("upgrade-apps").Get(ctx, "app-secret", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("robot reading a Secret: %v, want 403", err)
		}
		widgets := schema.GroupVersionResource{Group: "upgrade.sqlkube.io", Version: "v1", Resource: "widgets"}
		if _, err := dynamic.NewForConfigOrDie(rcfg).Resource(widgets).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("robot listing widgets: %v", err)
		}
	})

	migrated := false
	t.Run("StorageVersionMigration", func(t *testing.T) {
		migrated = testStorageVersionMigration(t, ctx, dyn, served)
	})

	s.stop(t)

	t.Run("Log", func(t *testing.T) {
		for _, line := range lossInLog(s.stderr.String()) {
			t.Errorf("the log says: %s", line)
		}
	})

	t.Run("StoredVersions", func(t *testing.T) {
		after := storedVersions(t, data)
		for prefix, v := range oldStorageVersions {
			var old, now []string
			for _, k := range keysUnder(before, prefix) {
				if after[k] == "" {
					t.Errorf("%s (stored as %s) is gone or unreadable", k, before[k])
				}
				if after[k] == v {
					old = append(old, strings.TrimPrefix(k, prefix))
				} else {
					now = append(now, strings.TrimPrefix(k, prefix)+" as "+after[k])
				}
			}
			t.Logf("%s: still %s: %v; rewritten: %v", prefix, v, old, now)
			if !migrated {
				// Some objects of each resource stay as they were stored
				// and were read in that version all along.
				if len(old) == 0 && len(keysUnder(before, prefix)) > 1 {
					t.Errorf("%s: every object was rewritten; the test meant to read some in %s", prefix, v)
				}
				continue
			}
			// Migrated: every object is in the version the server
			// writes (the widgets' new storage version, v1).
			versions := map[string]bool{}
			for _, k := range keysUnder(after, prefix) {
				versions[after[k]] = true
			}
			if want := migratedVersions[prefix]; len(versions) != 1 || (want != "" && !versions[want]) {
				t.Errorf("%s after a StorageVersionMigration: stored as %v, want one version (%s)", prefix, slices.Sorted(maps.Keys(versions)), want)
			}
		}
	})
}

// servedResource is one listable resource the server serves, at its
// preferred version.
type servedResource struct {
	gvr   schema.GroupVersionResource
	verbs []string
}

// servedResources are the server's listable resources by kubectl's name
// (plural[.group]).
func servedResources(t *testing.T, dc discovery.DiscoveryInterface) map[string]servedResource {
	t.Helper()
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	out := map[string]servedResource{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			name := r.Name
			if gv.Group != "" {
				name += "." + gv.Group
			}
			out[name] = servedResource{gvr: gv.WithResource(r.Name), verbs: r.Verbs}
		}
	}
	return out
}

func objectKey(resource, namespace, name string) string {
	return resource + " " + namespace + "/" + name
}

// listServed lists every object of every served resource, by objectKey,
// all resources at once.
func listServed(t *testing.T, ctx context.Context, dyn dynamic.Interface, served map[string]servedResource) map[string]unstructured.Unstructured {
	t.Helper()
	out := map[string]unstructured.Unstructured{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, r := range served {
		wg.Go(func() {
			l, err := dyn.Resource(r.gvr).List(ctx, metav1.ListOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("listing %s: %v", name, err)
				return
			}
			for _, o := range l.Items {
				out[objectKey(name, o.GetNamespace(), o.GetName())] = o
			}
		})
	}
	wg.Wait()
	return out
}

// replaceable says whether a controller may have replaced o: its pods,
// and the endpoint slices of Services.
func replaceable(o fixtureObject) bool {
	return o.Controller != "" && (o.Resource == "pods" || o.Resource == "endpointslices.discovery.k8s.io")
}

// fixtureGVR is o's resource at the version the old server listed it in.
func fixtureGVR(o fixtureObject) schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(o.APIVersion)
	plural, _, _ := strings.Cut(o.Resource, ".")
	return gv.WithResource(plural)
}

// waitUpgrade calls cond every 200 ms until it is true, failing t on an
// error or after upgradeWait.
func waitUpgrade(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRunning says whether p is Running, ready and not being deleted.
func podRunning(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podReady(p)
}
