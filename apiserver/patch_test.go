package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

func createConfigMap(t *testing.T, cs kubernetes.Interface, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func createPod(t *testing.T, cs kubernetes.Interface, name string, containers ...corev1.Container) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: containers},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func TestPatch_MergePatchAddsLabelAndData(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cm := createConfigMap(t, cs, "m", map[string]string{"a": "1"})

	patch := `{"metadata":{"labels":{"env":"prod"}},"data":{"b":"2"}}`
	got, err := cs.CoreV1().ConfigMaps("default").Patch(ctx, "m", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["env"] != "prod" || got.Data["a"] != "1" || got.Data["b"] != "2" {
		t.Fatalf("patched: labels %v data %v", got.Labels, got.Data)
	}
	if got.ResourceVersion == cm.ResourceVersion || got.UID != cm.UID || !got.CreationTimestamp.Equal(&cm.CreationTimestamp) {
		t.Fatalf("patched meta: rv %s (was %s) uid %s (was %s)", got.ResourceVersion, cm.ResourceVersion, got.UID, cm.UID)
	}
	stored, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "m", metav1.GetOptions{})
	if err != nil || stored.Labels["env"] != "prod" || stored.Data["b"] != "2" || stored.ResourceVersion != got.ResourceVersion {
		t.Fatalf("stored: %v %+v", err, stored)
	}

	// A null removes a key (RFC 7386).
	got, err = cs.CoreV1().ConfigMaps("default").Patch(ctx, "m", types.MergePatchType, []byte(`{"data":{"a":null}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Data["a"]; ok || got.Data["b"] != "2" {
		t.Fatalf("after removing a: %v", got.Data)
	}
}

func TestPatch_StrategicMergeContainersByName(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	createPod(t, cs, "p", corev1.Container{Name: "a", Image: "busybox:1"}, corev1.Container{Name: "b", Image: "nginx:1"})

	patch := `{"spec":{"containers":[{"name":"b","image":"nginx:2"}]}}`
	got, err := cs.CoreV1().Pods("default").Patch(ctx, "p", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs0 := got.Spec.Containers
	if len(cs0) != 2 || cs0[0].Name != "a" || cs0[0].Image != "busybox:1" || cs0[1].Name != "b" || cs0[1].Image != "nginx:2" {
		t.Fatalf("containers after strategic merge: %+v", cs0)
	}

	// The same body as a JSON merge patch replaces the whole list, which
	// would remove container a: pod validation refuses that (422).
	_, err = cs.CoreV1().Pods("default").Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not add or remove containers") {
		t.Fatalf("merge patch removing a container: %v, want 422 Invalid", err)
	}
}

func TestPatch_JSONPatch(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")
	createConfigMap(t, cs, "j", map[string]string{"k": "v"})

	got, err := cms.Patch(ctx, "j", types.JSONPatchType,
		[]byte(`[{"op":"test","path":"/data/k","value":"v"},{"op":"replace","path":"/data/k","value":"v2"},{"op":"add","path":"/data/n","value":"new"}]`),
		metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "v2" || got.Data["n"] != "new" {
		t.Fatalf("data after json patch: %v", got.Data)
	}

	// A failing test operation: 422 Invalid, nothing written.
	_, err = cms.Patch(ctx, "j", types.JSONPatchType,
		[]byte(`[{"op":"test","path":"/data/k","value":"wrong"},{"op":"replace","path":"/data/k","value":"x"}]`),
		metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("failed test op: got %v, want 422 Invalid", err)
	}
	if !strings.Contains(err.Error(), "test failed") {
		t.Errorf("failed test op: message lacks the reason: %v", err)
	}
	// Removing a key that does not exist is 422 too.
	_, err = cms.Patch(ctx, "j", types.JSONPatchType, []byte(`[{"op":"remove","path":"/data/missing"}]`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("remove of a missing key: got %v, want 422 Invalid", err)
	}
	after, err := cms.Get(ctx, "j", metav1.GetOptions{})
	if err != nil || after.Data["k"] != "v2" || len(after.Data) != 2 || after.ResourceVersion != got.ResourceVersion {
		t.Fatalf("object changed by failed patches: %v %+v (rv was %s)", err, after, got.ResourceVersion)
	}
}

func TestPatch_StaleResourceVersionConflicts(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")
	cm := createConfigMap(t, cs, "c", map[string]string{"k": "v"})
	stale := cm.ResourceVersion

	// A patch carrying the current resourceVersion applies.
	cur, err := cms.Patch(ctx, "c", types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"data":{"k":"v2"}}`, stale), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The same one again is stale now.
	_, err = cms.Patch(ctx, "c", types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"data":{"k":"v3"}}`, stale), metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale resourceVersion: got %v, want Conflict", err)
	}
	_, err = cms.Patch(ctx, "c", types.JSONPatchType,
		fmt.Appendf(nil, `[{"op":"replace","path":"/metadata/resourceVersion","value":%q}]`, stale), metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale resourceVersion by json patch: got %v, want Conflict", err)
	}
	after, err := cms.Get(ctx, "c", metav1.GetOptions{})
	if err != nil || after.Data["k"] != "v2" || after.ResourceVersion != cur.ResourceVersion {
		t.Fatalf("object changed by conflicting patches: %v %+v", err, after)
	}
}

// TestPatch_ConcurrentPatchesAllApply: patches race on one object; each
// is applied to the latest version (GuaranteedUpdate retries), so none is
// lost.
func TestPatch_ConcurrentPatchesAllApply(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	createConfigMap(t, cs, "race", nil)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			patch := fmt.Appendf(nil, `{"data":{"k%d":"v"}}`, i)
			if _, err := cs.CoreV1().ConfigMaps("default").Patch(ctx, "race", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "race", metav1.GetOptions{})
	if err != nil || len(got.Data) != n {
		t.Fatalf("after %d concurrent patches: %v %v", n, err, got.Data)
	}
}

func TestPatch_StatusSubresource(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	pods := cs.CoreV1().Pods("default")
	createPod(t, cs, "s", corev1.Container{Name: "c", Image: "busybox"})

	// Through /status the spec cannot change; metadata can, as the pod
	// status strategy of kube-apiserver allows (labels, annotations).
	patch := `{"metadata":{"labels":{"via":"status"}},"spec":{"activeDeadlineSeconds":5},"status":{"phase":"Running","podIP":"10.0.0.1"}}`
	got, err := pods.Patch(ctx, "s", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "10.0.0.1" {
		t.Fatalf("status after status patch: %+v", got.Status)
	}
	if got.Labels["via"] != "status" || got.Spec.ActiveDeadlineSeconds != nil || got.Generation != 1 {
		t.Fatalf("status patch: labels %v deadline %v generation %d, want via=status, no deadline, generation 1", got.Labels, got.Spec.ActiveDeadlineSeconds, got.Generation)
	}

	// Through the main resource the status cannot change.
	patch = `{"metadata":{"labels":{"via":"main"}},"status":{"phase":"Failed"}}`
	got, err = pods.Patch(ctx, "s", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["via"] != "main" || got.Status.Phase != corev1.PodRunning {
		t.Fatalf("main patch: labels %v phase %s, want via=main and Running", got.Labels, got.Status.Phase)
	}
	stored, err := pods.Get(ctx, "s", metav1.GetOptions{})
	if err != nil || stored.Status.Phase != corev1.PodRunning || stored.Labels["via"] != "main" {
		t.Fatalf("stored: %v %+v", err, stored)
	}
}

func TestPatch_Generation(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	pods := cs.CoreV1().Pods("default")
	pod := createPod(t, cs, "g", corev1.Container{Name: "c", Image: "busybox:1"})
	if pod.Generation != 1 {
		t.Fatalf("created with generation %d", pod.Generation)
	}
	got, err := pods.Patch(ctx, "g", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"},"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != 1 {
		t.Fatalf("metadata-only patch moved generation to %d", got.Generation)
	}
	got, err = pods.Patch(ctx, "g", types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != 2 || got.Spec.Containers[0].Image != "busybox:2" {
		t.Fatalf("spec patch: generation %d image %s, want 2 and busybox:2", got.Generation, got.Spec.Containers[0].Image)
	}
	// A patch that leaves the spec as it is does not move it either.
	got, err = pods.Patch(ctx, "g", types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}`), metav1.PatchOptions{})
	if err != nil || got.Generation != 2 {
		t.Fatalf("no-op spec patch: %v generation %d", err, got.Generation)
	}
}

func TestPatch_DryRun(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")
	cm := createConfigMap(t, cs, "d", map[string]string{"k": "v"})
	got, err := cms.Patch(ctx, "d", types.MergePatchType, []byte(`{"data":{"k":"dry"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "dry" {
		t.Fatalf("dry run answered %v", got.Data)
	}
	stored, err := cms.Get(ctx, "d", metav1.GetOptions{})
	if err != nil || stored.Data["k"] != "v" || stored.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("dry run wrote: %v %+v", err, stored)
	}
	if _, err := cms.Patch(ctx, "nope", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry run on a missing object: got %v, want NotFound", err)
	}
}

// TestPatch_Errors: bad patches get a 4xx Status and change nothing.
func TestPatch_Errors(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm := createConfigMap(t, cs, "e", map[string]string{"k": "v"})
	const merge, jsonp, smp = "application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json"
	const path = "/api/v1/namespaces/default/configmaps/e"
	cases := []struct {
		name, path, query, contentType, body string
		want                                 int
		reason                               metav1.StatusReason
	}{
		{"bad merge json", path, "", merge, `{"data":`, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"merge patch not an object", path, "", merge, `"just a string"`, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"bad json patch", path, "", jsonp, `{"op":"replace"}`, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"bad strategic json", path, "", smp, `{"data":`, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"empty body", path, "", merge, ``, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"wrong field type", path, "", merge, `{"data":{"k":1}}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"merge patch gives an array", path, "", merge, `[1]`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"kind changed", path, "", merge, `{"kind":"Secret"}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"apiVersion changed", path, "", jsonp, `[{"op":"replace","path":"/apiVersion","value":"v2"}]`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"unknown kind", path, "", merge, `{"kind":"Widget"}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"json patch unknown op", path, "", jsonp, `[{"op":"frobnicate","path":"/data/k"}]`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"name changed", path, "", merge, `{"metadata":{"name":"other"}}`, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"namespace changed", path, "", merge, `{"metadata":{"namespace":"other"}}`, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"invalid label", path, "", merge, `{"metadata":{"labels":{"a b":"c"}}}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"text content type", path, "", "text/plain", `{}`, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType},
		{"json content type", path, "", "application/json", `{}`, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType},
		{"apply without fieldManager", path, "", "application/apply-patch+yaml", `data: {k: x}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"apply cbor", path, "", "application/apply-patch+cbor", `data: {k: x}`, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType},
		{"bad dryRun", path, "?dryRun=Some", merge, `{"data":{"k":"x"}}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"force on merge patch", path, "?force=true", merge, `{"data":{"k":"x"}}`, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid},
		{"huge body", path, "", merge, `{"data":{"k":"` + strings.Repeat("x", 4<<20) + `"}}`, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge},
		{"missing object", "/api/v1/namespaces/default/configmaps/missing", "", merge, `{"data":{"k":"x"}}`, http.StatusNotFound, metav1.StatusReasonNotFound},
		{"status of a configmap", path + "/status", "", merge, `{}`, http.StatusNotFound, metav1.StatusReasonNotFound},
		{"collection", "/api/v1/namespaces/default/configmaps", "", merge, `{}`, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPatch, cfg.Host+tc.path+tc.query, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d (%s), want %d", resp.StatusCode, body, tc.want)
			}
			var status metav1.Status
			if err := json.Unmarshal(body, &status); err != nil || status.Kind != "Status" {
				t.Fatalf("body is not a Status (%v): %s", err, body)
			}
			t.Logf("%d %s", status.Code, status.Message)
			if status.Code != int32(tc.want) || status.Reason != tc.reason || status.Message == "" {
				t.Fatalf("status %d %s %q, want %d %s and a message", status.Code, status.Reason, status.Message, tc.want, tc.reason)
			}
		})
	}
	after, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "e", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != cm.ResourceVersion || after.Data["k"] != "v" {
		t.Fatalf("bad patches changed the object: %v %+v", err, after)
	}
}

// TestPatch_ClientGoErrors: client-go sees the failures as the typed
// errors callers test for.
func TestPatch_ClientGoErrors(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")
	createConfigMap(t, cs, "x", nil)
	if _, err := cms.Patch(ctx, "missing", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("missing object: got %v, want NotFound", err)
	}
	if _, err := cms.Patch(ctx, "x", types.ApplyPatchType, []byte(`{}`), metav1.PatchOptions{FieldManager: "test"}); !apierrors.IsBadRequest(err) {
		t.Errorf("apply patch without kind: got %v, want BadRequest", err)
	}
	if _, err := cms.Patch(ctx, "x", types.MergePatchType, []byte(`{"data":`), metav1.PatchOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("bad merge patch: got %v, want BadRequest", err)
	}
}
