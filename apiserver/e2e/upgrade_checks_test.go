package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The checks of TestUpgrade_FromV1342 that take more than a few lines.

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
