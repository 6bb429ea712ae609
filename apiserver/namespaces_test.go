package apiserver_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestNamespace_Lifecycle: deleting a namespace leaves it Terminating
// (its "kubernetes" finalizer holds it), nothing new may be created in
// it, an update cannot drop the finalizer, finalize can and the namespace
// is then gone; system namespaces cannot be deleted; namespaces have no
// deletecollection.
func TestNamespace_Lifecycle(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	nss := cs.CoreV1().Namespaces()
	ns, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
		t.Fatalf("finalizers of a new namespace: %v", ns.Spec.Finalizers)
	}
	if _, err := cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err = nss.Get(ctx, "doomed", metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp == nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("a deleted namespace: %v, deletionTimestamp %v, phase %q", err, ns.DeletionTimestamp, ns.Status.Phase)
	}
	// Deleting again changes nothing.
	if err := nss.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	_, err = cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "unable to create new content in namespace doomed because it is being terminated") {
		t.Fatalf("create in a terminating namespace: got %v, want 403", err)
	}
	if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		t.Fatalf("403 without a NamespaceTerminating cause: %#v", err)
	}
	// Existing content can still be changed (the controller must be able
	// to remove finalizers).
	if _, err := cs.CoreV1().ConfigMaps("doomed").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string]string{"a": "b"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// An update of the namespace keeps spec.finalizers.
	ns.Spec.Finalizers = nil
	ns.Labels = map[string]string{"x": "y"}
	if ns, err = nss.Update(ctx, ns, metav1.UpdateOptions{}); err != nil || len(ns.Spec.Finalizers) != 1 || ns.Labels["x"] != "y" {
		t.Fatalf("update: %v, finalizers %v", err, ns.Spec.Finalizers)
	}
	// Finalize with a stale resourceVersion conflicts.
	stale := ns.DeepCopy()
	stale.ResourceVersion = "1"
	stale.Spec.Finalizers = nil
	if _, err := nss.Finalize(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale finalize: got %v, want Conflict", err)
	}
	ns.Spec.Finalizers = nil
	if _, err := nss.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Get(ctx, "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a finalized namespace: got %v, want NotFound", err)
	}

	// Finalize on a live namespace only changes its finalizers.
	live, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "live"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Spec.Finalizers = append(live.Spec.Finalizers, "example.com/x")
	live.Status.Phase = corev1.NamespaceTerminating
	if live, err = nss.Finalize(ctx, live, metav1.UpdateOptions{}); err != nil || len(live.Spec.Finalizers) != 2 || live.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("finalize of a live namespace: %v, %v %q", err, live.Spec.Finalizers, live.Status.Phase)
	}
	// Without finalizers, a namespace goes at once.
	live.Spec.Finalizers = nil
	if _, err := nss.Finalize(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(ctx, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Get(ctx, "live", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a namespace without finalizers: got %v, want NotFound", err)
	}

	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		err := nss.Delete(ctx, name, metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "this namespace may not be deleted") {
			t.Fatalf("delete %s: got %v, want 403", name, err)
		}
	}
	if err := cs.CoreV1().RESTClient().Delete().Resource("namespaces").Do(ctx).Error(); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("deletecollection of namespaces: got %v, want 405", err)
	}
}

// TestDeleteCollection_FinalizersAndGrace: deletecollection deletes each
// object as DELETE would: objects with finalizers are only marked, bound
// pods wait their grace period, and DeleteOptions apply.
func TestDeleteCollection_FinalizersAndGrace(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"set": "1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kept", Labels: map[string]string{"set": "1"}, Finalizers: []string{"example.com/keep"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
	} {
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, metav1.ListOptions{LabelSelector: "set=1"}); err != nil {
		t.Fatal(err)
	}
	if list, _ := cms.List(ctx, metav1.ListOptions{}); len(list.Items) != 3 {
		t.Fatalf("a dry-run deletecollection deleted: %d left", len(list.Items))
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "set=1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "plain", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("plain: got %v, want NotFound", err)
	}
	if cm, err := cms.Get(ctx, "kept", metav1.GetOptions{}); err != nil || cm.DeletionTimestamp == nil {
		t.Fatalf("an object with a finalizer: %v, %+v", err, cm)
	}
	if _, err := cms.Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Fatalf("an unselected object: %v", err)
	}

	pods := cs.CoreV1().Pods("default")
	for _, node := range []string{"", "n1"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p" + node}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grace := int64(5)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("unbound pod: got %v, want NotFound", err)
	}
	p, err := pods.Get(ctx, "pn1", metav1.GetOptions{})
	if err != nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 5 {
		t.Fatalf("bound pod: %v %+v", err, p.ObjectMeta)
	}
}
