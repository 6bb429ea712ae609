package apiserver_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestBinding: Bind sets the node and PodScheduled; binding again, or
// binding a pod being deleted, is a 409; a missing pod is a 404; a target
// that is not a node is a 422; the legacy bindings resource binds too.
func TestBinding(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	pods := cs.CoreV1().Pods("default")
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	for _, name := range []string{"a", "b", "c"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"example.com/keep"}}, Spec: spec}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(pod, node string) error {
		return pods.Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: map[string]string{"scheduler/by": "test"}},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
	}
	if err := bind("a", "node-1"); err != nil {
		t.Fatal(err)
	}
	got, err := pods.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scheduled := false
	for _, c := range got.Status.Conditions {
		scheduled = scheduled || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue)
	}
	if got.Spec.NodeName != "node-1" || !scheduled || got.Annotations["scheduler/by"] != "test" {
		t.Fatalf("bound pod: node %q, conditions %+v, annotations %v", got.Spec.NodeName, got.Status.Conditions, got.Annotations)
	}
	if err := bind("a", "node-2"); !apierrors.IsConflict(err) {
		t.Fatalf("binding a bound pod: got %v, want Conflict", err)
	}
	if err := bind("missing", "node-1"); !apierrors.IsNotFound(err) {
		t.Fatalf("binding a missing pod: got %v, want NotFound", err)
	}
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Target: corev1.ObjectReference{Kind: "Pod", Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("a target that is not a node: got %v, want Invalid", err)
	}
	if err := pods.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := bind("b", "node-1"); !apierrors.IsConflict(err) {
		t.Fatalf("binding a pod being deleted: got %v, want Conflict", err)
	}

	// POST /api/v1/namespaces/default/bindings, the older form.
	err = cs.CoreV1().RESTClient().Post().Namespace("default").Resource("bindings").
		Body(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Target: corev1.ObjectReference{Name: "node-3"}}).Do(ctx).Error()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pods.Get(ctx, "c", metav1.GetOptions{}); err != nil || got.Spec.NodeName != "node-3" {
		t.Fatalf("legacy binding: %v, node %q", err, got.Spec.NodeName)
	}

	// Discovery lists the subresources.
	res, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"pods/binding": false, "pods/eviction": false, "namespaces/finalize": false, "bindings": false}
	for _, r := range res.APIResources {
		if _, ok := want[r.Name]; ok {
			want[r.Name] = true
		}
		if r.Name == "namespaces" {
			for _, v := range r.Verbs {
				if v == "deletecollection" {
					t.Fatal("namespaces list deletecollection")
				}
			}
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("discovery lacks %s", name)
		}
	}
}
