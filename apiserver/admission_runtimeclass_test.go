package apiserver_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestAdmission_RuntimeClass: Kubernetes' RuntimeClass plugin runs on pod
// creates: a pod naming a RuntimeClass that does not exist is refused
// (403); one naming an existing class gets its overhead, node selector
// and tolerations; an overhead or node selector that contradicts the
// class is refused.
func TestAdmission_RuntimeClass(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	pods := cs.CoreV1().Pods("default")
	withClass := func(name, class string) *corev1.Pod {
		p := simplePod(name)
		p.Spec.RuntimeClassName = ptr.To(class)
		return p
	}

	_, err := pods.Create(ctx, withClass("a", "missing"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `RuntimeClass "missing" not found`) {
		t.Fatalf("a pod of a missing RuntimeClass: %v, want Forbidden", err)
	}

	_, err = cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("120Mi")}},
		Scheduling: &nodev1.Scheduling{
			NodeSelector: map[string]string{"sandbox": "gvisor"},
			Tolerations:  []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpEqual, Value: "gvisor", Effect: corev1.TaintEffectNoSchedule}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := withClass("b", "gvisor")
	p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	got, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cpu := got.Spec.Overhead[corev1.ResourceCPU]; cpu.String() != "250m" {
		t.Errorf("overhead %v, want the class's", got.Spec.Overhead)
	}
	if got.Spec.NodeSelector["sandbox"] != "gvisor" || got.Spec.NodeSelector["disk"] != "ssd" {
		t.Errorf("node selector %v, want the pod's and the class's", got.Spec.NodeSelector)
	}
	tolerated := false
	for _, tol := range got.Spec.Tolerations {
		tolerated = tolerated || (tol.Key == "sandbox" && tol.Value == "gvisor")
	}
	if !tolerated {
		t.Errorf("tolerations %v, want the class's", got.Spec.Tolerations)
	}

	conflicting := withClass("c", "gvisor")
	conflicting.Spec.NodeSelector = map[string]string{"sandbox": "kata"}
	if _, err := pods.Create(ctx, conflicting, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a node selector that conflicts with the class's: %v, want Forbidden", err)
	}
	overhead := withClass("d", "gvisor")
	overhead.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if _, err := pods.Create(ctx, overhead, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("an overhead other than the class's: %v, want Forbidden", err)
	}
}
