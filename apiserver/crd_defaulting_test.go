package apiserver_test

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// TestCRD_DefaultsOnRead: an object stored before its schema gained a
// default is read (get, list, watch) with the default applied, as
// Kubernetes' "custom resource defaulting for requests and from storage
// works" conformance test expects; what was stored stays as it was.
func TestCRD_DefaultsOnRead(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	createEstablished(t, cfg, &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "letters.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "letters", Singular: "letter", Kind: "Letter"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"a": {Type: "string"}, "b": {Type: "string"}},
				}},
			}},
		},
	})
	letters := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "letters"})
	_, err := letters.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Letter", "metadata": map[string]any{"name": "x"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	cs := apiextensionsclient.NewForConfigOrDie(cfg)
	_, err = cs.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, "letters.example.com", types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/a/default","value":"A"}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *unstructured.Unstructured
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := letters.Get(ctx, "x", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = u
		return u.Object["a"] != nil, nil
	})
	if err != nil {
		t.Fatalf("get: not defaulted on read: %v (last read %v)", err, got)
	}
	if got.Object["a"] != "A" {
		t.Errorf("get: a = %v, want A", got.Object["a"])
	}

	list, err := letters.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Object["a"] != "A" {
		t.Errorf("list: %v, want x with a: A", list.Items)
	}
	w, err := letters.Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if u, ok := ev.Object.(*unstructured.Unstructured); !ok || u.Object["a"] != "A" {
			t.Errorf("watch: got %s %v, want x with a: A", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch: no event within 10s")
	}
}
