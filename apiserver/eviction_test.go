package apiserver_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// TestEviction: a running, ready pod covered by a budget that allows no
// disruption gets 429 and stays; with one allowed, the eviction spends it
// and deletes the pod; a pending pod, or one no budget covers, is evicted
// without looking; two budgets are a 500; dry run changes nothing.
func TestEviction(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	const ns = "default"
	pods, pdbs := cs.CoreV1().Pods(ns), cs.PolicyV1().PodDisruptionBudgets(ns)
	running := func(name string, lbls map[string]string) {
		t.Helper()
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evict := func(name string, opts *metav1.DeleteOptions) error {
		return cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, DeleteOptions: opts})
	}
	gone := func(name string) bool {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	one := intstr.FromInt32(1)
	pdb, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := map[string]string{"app": "web"}
	running("web-1", web)
	running("web-2", web)

	// The budget's status has not been computed yet: 429.
	if err := evict("web-1", nil); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("a budget not yet observed: got %v, want 429", err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 2}
	if pdb, err = pdbs.UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = evict("web-1", nil)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "Cannot evict pod as it would violate the pod's disruption budget.") {
		t.Fatalf("no disruption allowed: got %v, want 429", err)
	}
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 ||
		status.Status().Details.Causes[0].Type != policyv1.DisruptionBudgetCause {
		t.Fatalf("429 without a DisruptionBudget cause: %#v", err)
	}
	if gone("web-1") {
		t.Fatal("a pod the budget protects was deleted")
	}

	pdb.Status.DisruptionsAllowed = 1
	if pdb, err = pdbs.UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := evict("web-1", &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := pdbs.Get(ctx, "web", metav1.GetOptions{}); gone("web-1") || got.Status.DisruptionsAllowed != 1 {
		t.Fatalf("a dry-run eviction changed something: pod gone %v, allowed %d", gone("web-1"), got.Status.DisruptionsAllowed)
	}
	if err := evict("web-1", nil); err != nil {
		t.Fatal(err)
	}
	if !gone("web-1") {
		t.Fatal("the evicted pod is still there")
	}
	got, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil || got.Status.DisruptionsAllowed != 0 || got.Status.DisruptedPods["web-1"].Time.IsZero() {
		t.Fatalf("budget after the eviction: %v %+v", err, got.Status)
	}
	if err := evict("web-2", nil); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("budget spent: got %v, want 429", err)
	}

	// A pending pod goes without looking at the budget.
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-pending", Labels: web},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := evict("web-pending", nil); err != nil || !gone("web-pending") {
		t.Fatalf("pending pod: %v, gone %v", err, gone("web-pending"))
	}
	// No budget covers this one.
	running("other", map[string]string{"app": "other"})
	if err := evict("other", nil); err != nil || !gone("other") {
		t.Fatalf("uncovered pod: %v, gone %v", err, gone("other"))
	}
	if err := evict("missing", nil); !apierrors.IsNotFound(err) {
		t.Fatalf("missing pod: got %v, want NotFound", err)
	}
	// Two budgets over one pod: 500, as Kubernetes.
	if _, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := evict("web-2", nil); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "more than one PodDisruptionBudget") {
		t.Fatalf("two budgets: got %v, want 500", err)
	}
	// A bound pod is evicted with the Eviction's grace period.
	if err := pdbs.Delete(ctx, "all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	running("bound", map[string]string{"app": "bound"})
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "bound"}, Target: corev1.ObjectReference{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grace := int64(7)
	if err := evict("bound", &metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, "bound", metav1.GetOptions{})
	if err != nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 7 {
		t.Fatalf("bound pod after eviction: %v %+v", err, p.ObjectMeta)
	}
	disrupted := false
	for _, c := range p.Status.Conditions {
		disrupted = disrupted || (c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue)
	}
	if !disrupted {
		t.Fatalf("no DisruptionTarget condition: %+v", p.Status.Conditions)
	}
}
