package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestPods_EphemeralContainers: pods/ephemeralcontainers reads the pod
// and writes only its ephemeral containers, through Kubernetes'
// EphemeralContainersStrategy: a strategic merge patch (what kubectl
// debug sends) and an update add one, other changes in the same write
// are dropped, and removing or changing one is invalid, as in
// kube-apiserver.
func TestPods_EphemeralContainers(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	pods := cs.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, simplePod("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	patch := `{"metadata":{"labels":{"debugged":"yes"}},"spec":{"containers":[{"name":"app","image":"nginx"}],` +
		`"ephemeralContainers":[{"name":"debugger","image":"busybox","targetContainerName":"app","stdin":true,"tty":true,"terminationMessagePolicy":"File"}]}}`
	got, err := pods.Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "ephemeralcontainers")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.EphemeralContainers) != 1 || got.Spec.EphemeralContainers[0].Name != "debugger" || got.Spec.EphemeralContainers[0].TargetContainerName != "app" {
		t.Fatalf("ephemeral containers after the patch: %+v", got.Spec.EphemeralContainers)
	}
	if got.Spec.Containers[0].Image != "busybox" || got.Labels["debugged"] != "" {
		t.Errorf("the patch changed more than ephemeral containers: image %q, labels %v", got.Spec.Containers[0].Image, got.Labels)
	}
	// Defaulted as the pod's containers are.
	if got.Spec.EphemeralContainers[0].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("imagePullPolicy %q, want Always (latest tag)", got.Spec.EphemeralContainers[0].ImagePullPolicy)
	}

	// GET answers with the pod.
	body, err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name("web").SubResource("ephemeralcontainers").DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), `"kind":"Pod"`) || !strings.Contains(string(body), `"debugger"`) {
		t.Fatalf("GET pods/web/ephemeralcontainers: %v\n%s", err, body)
	}

	// An update adds another.
	got.Spec.EphemeralContainers = append(got.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "second", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}})
	got, err = pods.UpdateEphemeralContainers(ctx, "web", got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.EphemeralContainers) != 2 {
		t.Fatalf("after the update: %+v", got.Spec.EphemeralContainers)
	}
	// Ephemeral containers are never removed nor changed.
	removed := got.DeepCopy()
	removed.Spec.EphemeralContainers = removed.Spec.EphemeralContainers[:1]
	if _, err := pods.UpdateEphemeralContainers(ctx, "web", removed, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("removing an ephemeral container: %v, want Invalid", err)
	}
	changed := got.DeepCopy()
	changed.Spec.EphemeralContainers[0].Image = "alpine"
	if _, err := pods.UpdateEphemeralContainers(ctx, "web", changed, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing an ephemeral container: %v, want Invalid", err)
	}
	// Nor added through the pod itself.
	viaPod := got.DeepCopy()
	viaPod.Spec.EphemeralContainers = append(viaPod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "third", Image: "busybox"}})
	if _, err := pods.Update(ctx, viaPod, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("adding an ephemeral container through the pod: %v, want Invalid", err)
	}
	// managedFields name the subresource.
	found := false
	for _, mf := range got.ManagedFields {
		found = found || mf.Subresource == "ephemeralcontainers"
	}
	if !found {
		t.Errorf("no managedFields entry for the subresource: %+v", got.ManagedFields)
	}
	// Only get, update and patch.
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		err := cs.CoreV1().RESTClient().Verb(method).Namespace("default").Resource("pods").Name("web").SubResource("ephemeralcontainers").Body([]byte("{}")).Do(ctx).Error()
		if !apierrors.IsMethodNotSupported(err) {
			t.Errorf("%s pods/web/ephemeralcontainers: %v, want 405", method, err)
		}
	}
	if err := cs.CoreV1().RESTClient().Delete().Namespace("default").Resource("pods").Name("web").SubResource("status").Do(ctx).Error(); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("DELETE pods/web/status: %v, want 405", err)
	}
	if _, err := pods.Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod after refused subresource deletes: %v", err)
	}
}

// TestPods_Resize: pods/resize changes only the containers' resources
// and resize policies, through Kubernetes' ResizeStrategy (the pod's
// generation moves); the pod itself cannot, and a resize that would
// change the pod's QoS class is invalid, as in kube-apiserver.
func TestPods_Resize(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	pods := cs.CoreV1().Pods("default")
	pod := simplePod("web")
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	pod, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Through the pod: refused.
	viaPod := pod.DeepCopy()
	viaPod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("150m")
	if _, err := pods.Update(ctx, viaPod, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("resizing through the pod: %v, want Invalid", err)
	}

	// Through pods/resize: resources change, nothing else does.
	resized := viaPod.DeepCopy()
	resized.Spec.Containers[0].Image = "nginx"
	resized.Labels = map[string]string{"resized": "yes"}
	got, err := pods.UpdateResize(ctx, "web", resized, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "150m" {
		t.Errorf("cpu request after the resize: %s", q.String())
	}
	if got.Spec.Containers[0].Image != "busybox" || got.Labels["resized"] != "" {
		t.Errorf("the resize changed more than resources: image %q, labels %v", got.Spec.Containers[0].Image, got.Labels)
	}
	if got.Generation <= pod.Generation {
		t.Errorf("generation %d after the resize, was %d", got.Generation, pod.Generation)
	}

	// A patch, as kubectl patch --subresource=resize sends.
	patch := `{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"256Mi"}}}]}}`
	got, err = pods.Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; q.String() != "256Mi" {
		t.Errorf("memory limit after the patch: %s", q.String())
	}

	// Burstable to BestEffort: the QoS class may not change.
	bestEffort := got.DeepCopy()
	bestEffort.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	if _, err := pods.UpdateResize(ctx, "web", bestEffort, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a resize to BestEffort: %v, want Invalid", err)
	}
	body, err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name("web").SubResource("resize").DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), `"256Mi"`) {
		t.Errorf("GET pods/web/resize: %v\n%s", err, body)
	}
}
