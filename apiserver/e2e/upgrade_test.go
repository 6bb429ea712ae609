package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
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

// testWorkloadsRunning waits until the fixture's workloads run, with web
// replicas of the Deployment: every pod of theirs Running and ready, none
// of the pods gone, the Job still complete and the GPU claim still
// allocated to its pod.
func testWorkloadsRunning(t *testing.T, cs kubernetes.Interface, web int32, gone map[types.UID]bool) {
	t.Helper()
	waitUpgrade(t, fmt.Sprintf("the fixture's workloads (web: %d) running", web), func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments("upgrade-apps").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Status.ObservedGeneration < d.Generation || d.Status.ReadyReplicas != web ||
			d.Status.UpdatedReplicas != web || d.Status.Replicas != web {
			return false, err
		}
		ss, err := cs.AppsV1().StatefulSets("upgrade-apps").Get(ctx, "db", metav1.GetOptions{})
		if err != nil || ss.Status.ReadyReplicas != 2 || ss.Status.CurrentRevision != ss.Status.UpdateRevision {
			return false, err
		}
		ds, err := cs.AppsV1().DaemonSets("upgrade-apps").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil || ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 || ds.Status.UpdatedNumberScheduled != 2 {
			return false, err
		}
		rc, err := cs.CoreV1().ReplicationControllers("upgrade-config").Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil || rc.Status.ReadyReplicas != 1 {
			return false, err
		}
		pods, err := cs.CoreV1().Pods("upgrade-apps").List(ctx, metav1.ListOptions{LabelSelector: "app in (web, db, agent)"})
		if err != nil {
			return false, err
		}
		legacy, err := cs.CoreV1().Pods("upgrade-config").List(ctx, metav1.ListOptions{LabelSelector: "app=legacy"})
		if err != nil {
			return false, err
		}
		all := append(pods.Items, legacy.Items...)
		for i := range all {
			if !podRunning(&all[i]) || gone[all[i].UID] {
				return false, nil
			}
		}
		if len(all) != int(web)+5 {
			return false, nil
		}
		for _, name := range []string{"standalone", "gpu-user"} {
			p, err := cs.CoreV1().Pods("upgrade-apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil || !podRunning(p) {
				return false, err
			}
		}
		return true, nil
	})
	ctx := context.Background()
	job, err := cs.BatchV1().Jobs("upgrade-apps").Get(ctx, "once", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Status.Succeeded != 1 || !slices.ContainsFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == "Complete" && c.Status == corev1.ConditionTrue
	}) {
		t.Errorf("job once: %+v, want it complete", job.Status)
	}
	claim, err := cs.ResourceV1().ResourceClaims("upgrade-apps").Get(ctx, "gpu-claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 ||
		claim.Status.Allocation.Devices.Results[0].Device != "gpu-0" ||
		len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Name != "gpu-user" {
		t.Errorf("claim gpu-claim: %+v, want gpu-0 allocated and reserved for gpu-user", claim.Status)
	}
}

// testWidgetsAtBothVersions reads the fixture's widgets, stored as
// v1alpha1, at v1alpha1 and v1, and writes them at each.
func testWidgetsAtBothVersions(t *testing.T, ctx context.Context, dyn dynamic.Interface, fixture fixtureManifest) {
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "upgrade.sqlkube.io", Version: v, Resource: "widgets"}
	}
	get := func(v, ns, name string) *unstructured.Unstructured {
		t.Helper()
		w, err := dyn.Resource(gvr(v)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("widget %s/%s at %s: %v", ns, name, v, err)
		}
		if w.GetAPIVersion() != "upgrade.sqlkube.io/"+v {
			t.Errorf("widget %s/%s read at %s is %s", ns, name, v, w.GetAPIVersion())
		}
		return w
	}
	n := 0
	for _, o := range fixture.Objects {
		if o.Resource != "widgets.upgrade.sqlkube.io" {
			continue
		}
		n++
		for _, v := range []string{"v1alpha1", "v1"} {
			w := get(v, o.Namespace, o.Name)
			if string(w.GetUID()) != o.UID {
				t.Errorf("widget %s/%s at %s: uid %s, want %s", o.Namespace, o.Name, v, w.GetUID(), o.UID)
			}
			for _, d := range notWithin("spec", o.Object["spec"], asJSON(t, w.Object)["spec"]) {
				t.Errorf("widget %s/%s at %s: %s", o.Namespace, o.Name, v, d)
			}
		}
	}
	if n != 3 {
		t.Errorf("the fixture lists %d widgets, want 3", n)
	}
	if ready, _, _ := unstructured.NestedBool(get("v1", "upgrade-apps", "alpha").Object, "status", "ready"); !ready {
		t.Error("widget alpha lost its status (ready: true)")
	}
	// A write at each version reads back at the other.
	for _, step := range []struct{ write, read, patch, field, want string }{
		{"v1alpha1", "v1", `{"spec":{"size":6}}`, "size", "6"},
		{"v1", "v1alpha1", `{"spec":{"color":"teal"}}`, "color", "teal"},
	} {
		if _, err := dyn.Resource(gvr(step.write)).Namespace("upgrade-apps").Patch(ctx, "beta", types.MergePatchType, []byte(step.patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patching widget beta at %s: %v", step.write, err)
		}
		got, _, _ := unstructured.NestedFieldNoCopy(get(step.read, "upgrade-apps", "beta").Object, "spec", step.field)
		if fmt.Sprint(got) != step.want {
			t.Errorf("widget beta written at %s, read at %s: spec.%s %v, want %s", step.write, step.read, step.field, got, step.want)
		}
	}
	delta := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "upgrade.sqlkube.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "delta"}, "spec": map[string]any{"size": int64(1), "color": "black"},
	}}
	if _, err := dyn.Resource(gvr("v1")).Namespace("upgrade-apps").Create(ctx, delta, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get("v1alpha1", "upgrade-apps", "delta")
}

// testOneWritePerResource patches a label onto one object of every
// resource the fixture has objects of (one of the fixture's own where
// there is one), at the version the old server listed it in, and reads it
// back.
func testOneWritePerResource(t *testing.T, ctx context.Context, dyn dynamic.Interface, served map[string]servedResource, fixture fixtureManifest) {
	targets := map[string]fixtureObject{}
	var order []string
	for _, o := range fixture.Objects {
		r, ok := served[o.Resource]
		if !ok || !slices.Contains(r.verbs, "patch") || replaceable(o) {
			continue
		}
		prev, seen := targets[o.Resource]
		if !seen {
			order = append(order, o.Resource)
		}
		if !seen || (prev.Object == nil && o.Object != nil) {
			targets[o.Resource] = o
		}
	}
	patch := []byte(`{"metadata":{"labels":{"upgrade.sqlkube.io/written":"yes"}}}`)
	written := 0
	for _, name := range order {
		o := targets[name]
		client := dyn.Resource(fixtureGVR(o)).Namespace(o.Namespace)
		answer, err := client.Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Errorf("patching %s: %v", o, err)
			continue
		}
		got, err := client.Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("reading %s back: %v", o, err)
			continue
		}
		// A controller may have written it since (endpoints), dropping
		// the label; the write's own answer must hold it.
		for _, u := range []*unstructured.Unstructured{answer, got} {
			if string(u.GetUID()) != o.UID || (u.GetLabels()["upgrade.sqlkube.io/written"] != "yes" && u.GetResourceVersion() == answer.GetResourceVersion()) {
				t.Errorf("%s after a write: uid %s, labels %v", o, u.GetUID(), u.GetLabels())
			}
		}
		written++
	}
	t.Logf("wrote one object of each of %d of %d resources", written, len(order))
}

// lossPatterns are what a warning or error in the log says when stored
// data is lost or unreadable: objects that do not decode, convert or
// decrypt, kinds or versions the scheme lacks, the datastore or the
// cluster's identity failing, and panics.
var lossPatterns = regexp.MustCompile(`(?i)decod|corrupt|unmarshal|convert|no kind|not registered|transform|checksum|data loss|cluster identity|unseal|panic`)

// lossInLog returns the lines of a JSON log at warning level or above
// (klog's errors are warnings, see docs/logging.md) that match
// lossPatterns, and any other line that mentions a panic.
func lossInLog(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		var entry struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil {
			if strings.Contains(strings.ToLower(line), "panic") {
				out = append(out, line)
			}
			continue
		}
		switch entry.Level {
		case "warn", "error", "fatal", "panic":
			if lossPatterns.MatchString(line) {
				out = append(out, line)
			}
		}
	}
	return out
}

// migratedVersions are the versions a StorageVersionMigration must leave
// objects in where the test knows it: the widgets' after v1 becomes their
// storage version. Elsewhere every object must be in the one version the
// server writes (that of the object Writable patched).
var migratedVersions = map[string]string{
	"/registry/upgrade.sqlkube.io/widgets/": "upgrade.sqlkube.io/v1",
}

// testStorageVersionMigration rewrites what the fixture stores in old
// versions with storagemigration.k8s.io/v1 StorageVersionMigrations, as
// kube-apiserver 1.37 serves them: the widgets once v1 is their storage
// version, and the resources of oldStorageVersions. It says whether they
// all succeeded.
func testStorageVersionMigration(t *testing.T, ctx context.Context, dyn dynamic.Interface, served map[string]servedResource) bool {
	svm, ok := served["storageversionmigrations.storagemigration.k8s.io"]
	if !ok || svm.gvr.Version != "v1" {
		t.Fatalf("storagemigration.k8s.io/v1 storageversionmigrations are not served (%v), as kube-apiserver 1.37 serves them", svm.gvr)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	swap := `[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},` +
		`{"op":"replace","path":"/spec/versions/0/storage","value":false},` +
		`{"op":"replace","path":"/spec/versions/1/storage","value":true}]`
	if _, err := crds.Patch(ctx, "widgets.upgrade.sqlkube.io", types.JSONPatchType, []byte(swap), metav1.PatchOptions{}); err != nil {
		t.Fatalf("making v1 the widgets' storage version: %v", err)
	}
	waitUpgrade(t, "the widgets' storedVersions to take v1", func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, "widgets.upgrade.sqlkube.io", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
		return slices.Contains(stored, "v1") && slices.Contains(stored, "v1alpha1"), nil
	})
	// One migration per resource, all at once. Kubernetes' migrator
	// rewrites a resource once the garbage collector's informer of it
	// has seen the revision the migration started at
	// (status.resourceVersion); an idle resource's informer learns of a
	// later one from the watch's next bookmark, up to a minute on, so a
	// write to one object of each (one Writable or the widgets' test
	// already rewrote) brings it there at once.
	migrations := dyn.Resource(svm.gvr)
	type migration struct {
		gvr             schema.GroupVersionResource
		namespace, name string // the object written after the migration started
		started, done   bool
	}
	pending := []*migration{
		{gvr: schema.GroupVersionResource{Group: "upgrade.sqlkube.io", Version: "v1", Resource: "widgets"}, namespace: "upgrade-apps", name: "beta"},
		{gvr: schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}, name: "upgrade-fpga"},
		{gvr: schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}, namespace: "upgrade-apps", name: "gpu-claim"},
		{gvr: schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}, namespace: "upgrade-apps", name: "gpu-template"},
		{gvr: schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}, name: "upgrade-gpu-fake-0"},
		{gvr: schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattributesclasses"}, name: "upgrade-gold"},
	}
	for _, m := range pending {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": svm.gvr.GroupVersion().String(), "kind": "StorageVersionMigration",
			"metadata": map[string]any{"name": "upgrade-" + m.gvr.Resource},
			"spec":     map[string]any{"resource": map[string]any{"group": m.gvr.Group, "resource": m.gvr.Resource}},
		}}
		if _, err := migrations.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("migrating %s: %v", m.gvr.GroupResource(), err)
		}
	}
	touch := []byte(`{"metadata":{"annotations":{"upgrade.sqlkube.io/after-migration-started":"yes"}}}`)
	waitUpgrade(t, "the migrations", func(ctx context.Context) (bool, error) {
		done := true
		for _, m := range pending {
			if m.done {
				continue
			}
			obj, err := migrations.Get(ctx, "upgrade-"+m.gvr.Resource, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if rv, _, _ := unstructured.NestedString(obj.Object, "status", "resourceVersion"); rv != "" && !m.started {
				if _, err := dyn.Resource(m.gvr).Namespace(m.namespace).Patch(ctx, m.name, types.MergePatchType, touch, metav1.PatchOptions{}); err != nil {
					return false, err
				}
				m.started = true
			}
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, c := range conds {
				c, _ := c.(map[string]any)
				switch {
				case c["status"] != "True":
				case c["type"] == "Succeeded":
					m.done = true
				case c["type"] == "Failed":
					return false, fmt.Errorf("migrating %s failed: %v", m.gvr.GroupResource(), c["message"])
				}
			}
			done = done && m.done
		}
		return done, nil
	})
	return true
}
