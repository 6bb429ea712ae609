package apiserver_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestApply_ManagedFieldsAndConflicts: server-side apply creates a missing
// object, records who owns what in managedFields, refuses to take a field
// another manager owns (409) unless forced, and ordinary updates are
// tracked too.
func TestApply_ManagedFieldsAndConflicts(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	deploys := cs.AppsV1().Deployments("default")
	manifest := func(replicas string) []byte {
		return []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: ` + replicas + `
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
`)
	}
	d, err := deploys.Patch(ctx, "web", types.ApplyPatchType, manifest("2"), metav1.PatchOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("apply (create): %v", err)
	}
	if *d.Spec.Replicas != 2 || d.UID == "" || d.Generation != 1 {
		t.Fatalf("created: replicas %d uid %q generation %d", *d.Spec.Replicas, d.UID, d.Generation)
	}
	if len(d.ManagedFields) != 1 || d.ManagedFields[0].Manager != "alice" || d.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("managedFields after the first apply: %+v", d.ManagedFields)
	}

	// bob applies another replica count: a conflict with alice.
	_, err = deploys.Patch(ctx, "web", types.ApplyPatchType, manifest("5"), metav1.PatchOptions{FieldManager: "bob"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("conflicting apply: got %v, want Conflict", err)
	}
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Details == nil || len(st.Status().Details.Causes) == 0 {
		t.Fatalf("the conflict names no fields: %v", err)
	}
	// Forced, bob takes replicas over.
	force := true
	d, err = deploys.Patch(ctx, "web", types.ApplyPatchType, manifest("5"), metav1.PatchOptions{FieldManager: "bob", Force: &force})
	if err != nil || *d.Spec.Replicas != 5 || d.Generation != 2 {
		t.Fatalf("forced apply: %v (replicas %v)", err, d.Spec.Replicas)
	}

	// An ordinary update is recorded as an Update by its manager.
	d.Labels = map[string]string{"team": "a"}
	d, err = deploys.Update(ctx, d, metav1.UpdateOptions{FieldManager: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range d.ManagedFields {
		if e.Manager == "carol" && e.Operation == metav1.ManagedFieldsOperationUpdate {
			found = true
		}
	}
	if !found {
		t.Fatalf("the update is not in managedFields: %+v", d.ManagedFields)
	}
}
