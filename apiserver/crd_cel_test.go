package apiserver_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// CEL rules (x-kubernetes-validations) are enforced on create and, as
// transition rules, on update.
func TestCRD_CELRules(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	crd := widgetCRD()
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.XValidations = apiextensionsv1.ValidationRules{
		{Rule: "!has(self.replicas) || self.replicas <= 10", Message: "at most 10 replicas"},
		{Rule: "self.color == oldSelf.color", Message: "color is immutable"},
	}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	createEstablished(t, cfg, crd)
	widgets := dynamic.NewForConfigOrDie(cfg).Resource(widgetsGVR).Namespace("default")

	_, err := widgets.Create(ctx, widget("big", map[string]any{"replicas": int64(11)}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at most 10 replicas") {
		t.Fatalf("11 replicas: %v, want 422 with the rule's message", err)
	}
	w, err := widgets.Create(ctx, widget("ok", map[string]any{"replicas": int64(3), "color": "green"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(w.Object, "red", "spec", "color"); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.Update(ctx, w, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "color is immutable") {
		t.Fatalf("changing an immutable color: %v, want 422", err)
	}
}

// Fields a custom resource's schema does not know follow fieldValidation:
// pruned with a warning by default, refused under Strict.
func TestCRD_FieldValidation(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	createEstablished(t, cfg, widgetCRD())
	w := &warnings{}
	cfg.WarningHandler = w
	widgets := dynamic.NewForConfigOrDie(cfg).Resource(widgetsGVR).Namespace("default")

	_, err := widgets.Create(ctx, widget("strict", map[string]any{"colour": "red"}), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.colour"`) {
		t.Fatalf("unknown field under Strict: %v, want 400 naming spec.colour", err)
	}
	if _, err := widgets.Create(ctx, widget("warned", map[string]any{"colour": "red"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.msgs) != 1 || !strings.Contains(w.msgs[0], `unknown field "spec.colour"`) {
		t.Errorf("warnings %q, want one naming spec.colour", w.msgs)
	}
	// A patch adding an unknown field under Strict is 422, as Kubernetes
	// answers patches.
	_, err = widgets.Patch(ctx, "warned", "application/merge-patch+json", []byte(`{"spec":{"size":"L"}}`), metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size") {
		t.Fatalf("unknown field in a patch under Strict: %v, want 422", err)
	}
}

// Custom resources have no protobuf encoding: such a body is 415, as in
// Kubernetes.
func TestCRD_ProtobufBodyUnsupported(t *testing.T) {
	cfg := newServer(t)
	createEstablished(t, cfg, widgetCRD())
	resp, err := http.Post(cfg.Host+"/apis/example.com/v1/namespaces/default/widgets", "application/vnd.kubernetes.protobuf", strings.NewReader("k8s\x00junk"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), `"kind":"Status"`) {
		t.Fatalf("protobuf body for a custom resource: %d %s, want 415 with a Status", resp.StatusCode, body)
	}
}
