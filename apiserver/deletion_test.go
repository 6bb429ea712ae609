package apiserver_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestDelete_FinalizersAndGrace: an object with finalizers, or deleted in
// the foreground, is only marked (deletionTimestamp) until its last
// finalizer goes; a pod bound to a node waits for its grace period; an
// unbound pod and a plain object go at once.
func TestDelete_FinalizersAndGrace(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")

	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fin", Finalizers: []string{"example.com/keep"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "fin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Get(ctx, "fin", metav1.GetOptions{})
	if err != nil || cm.DeletionTimestamp == nil {
		t.Fatalf("an object with a finalizer: %v, deletionTimestamp %v", err, cm.DeletionTimestamp)
	}
	cm.Finalizers = nil
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "fin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after its last finalizer went: got %v, want NotFound", err)
	}

	// Foreground deletion leaves the garbage collector's finalizer.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fg"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fg := metav1.DeletePropagationForeground
	if err := cms.Delete(ctx, "fg", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	if cm, err = cms.Get(ctx, "fg", metav1.GetOptions{}); err != nil || len(cm.Finalizers) != 1 || cm.Finalizers[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("foreground deletion: %v, finalizers %v", err, cm.Finalizers)
	}

	// An object with a generation (a Deployment) held by a finalizer:
	// its deletion starting moves its generation too.
	deps := cs.AppsV1().Deployments("default")
	labels := map[string]string{"app": "d"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Finalizers: []string{"example.com/keep"}}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}}
	if d, err = deps.Create(ctx, d, metav1.CreateOptions{}); err != nil || d.Generation != 1 {
		t.Fatalf("create a Deployment: %v, generation %d", err, d.Generation)
	}
	if err := deps.Delete(ctx, "d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if d, err = deps.Get(ctx, "d", metav1.GetOptions{}); err != nil || d.DeletionTimestamp == nil || d.Generation != 2 {
		t.Errorf("a Deployment with a finalizer, deleted: %v, deletionTimestamp %v, generation %d (want 2)", err, d.DeletionTimestamp, d.Generation)
	}

	pods := cs.CoreV1().Pods("default")
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "unbound"}, Spec: spec},
		{ObjectMeta: metav1.ObjectMeta{Name: "bound"}, Spec: *spec.DeepCopy()},
	} {
		if p.Name == "bound" {
			p.Spec.NodeName = "node-1"
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pods.Delete(ctx, "unbound", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "unbound", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an unbound pod: got %v, want NotFound", err)
	}
	if err := pods.Delete(ctx, "bound", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, "bound", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("a bound pod: %v, %+v", err, p.ObjectMeta)
	}
	// Its deletion starting moves its generation, once.
	if p.Generation != 2 {
		t.Errorf("a bound pod being deleted has generation %d, want 2", p.Generation)
	}
	if err := pods.Delete(ctx, "bound", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := pods.Get(ctx, "bound", metav1.GetOptions{}); err != nil || p.Generation != 2 {
		t.Errorf("deleted again: %v, generation %d, want 2", err, p.Generation)
	}
	zero := int64(0)
	if err := pods.Delete(ctx, "bound", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "bound", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a bound pod deleted with grace 0: got %v, want NotFound", err)
	}
}
