package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// hostCRD is a namespaced CRD served in v1 and v2 (stored) with the same
// schema but other selectable fields: hostPort in v1, host and port in
// v2, as in Kubernetes' CustomResourceFieldSelectors conformance test.
// The schemas differ (their descriptions): a CRD whose versions share one
// schema has none per version, and selectableFields need one.
func hostCRD() *apiextensionsv1.CustomResourceDefinition {
	schemaProps := func(description string) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Description: description,
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"host": {Type: "string"}, "port": {Type: "integer"}, "hostPort": {Type: "string"},
			},
		}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "hosts.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "hosts", Singular: "host", Kind: "Host"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{
					Name: "v1", Served: true, Schema: schemaProps("a host, v1"),
					SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".hostPort"}},
				},
				{
					Name: "v2", Served: true, Storage: true, Schema: schemaProps("a host, v2"),
					SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".host"}, {JSONPath: ".port"}},
				},
			},
		},
	}
}

func hostObject(version, name, host string, port int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/" + version, "kind": "Host",
		"metadata": map[string]any{"name": name},
		"host":     host, "port": port, "hostPort": fmt.Sprintf("%s:%d", host, port),
	}}
}

// TestCRD_SelectableFields: list and watch select on a version's
// selectableFields (=, != and both fields at once); another version's
// fields are 400 there.
func TestCRD_SelectableFields(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	createEstablished(t, cfg, hostCRD())
	dyn := dynamic.NewForConfigOrDie(cfg)
	v1 := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "hosts"}).Namespace("default")
	v2 := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "hosts"}).Namespace("default")

	w, err := v2.Watch(ctx, metav1.ListOptions{FieldSelector: "host=host1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, h := range []*unstructured.Unstructured{
		hostObject("v2", "a", "host1", 80), hostObject("v2", "b", "host2", 80), hostObject("v2", "c", "host1", 8080),
	} {
		if _, err := v2.Create(ctx, h, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a", "c"} {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added || ev.Object.(*unstructured.Unstructured).GetName() != want {
				t.Fatalf("watch host=host1: got %s %v, want ADDED %s", ev.Type, ev.Object, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch host=host1: no event for %s within 10s", want)
		}
	}

	for _, tc := range []struct {
		client   dynamic.ResourceInterface
		selector string
		want     []string
	}{
		{v2, "host=host1", []string{"a", "c"}},
		{v2, "host!=host1", []string{"b"}},
		{v2, "host=host1,port=80", []string{"a"}},
		{v2, "port=8080", []string{"c"}},
		{v1, "hostPort=host2:80", []string{"b"}},
		{v2, "metadata.name=b", []string{"b"}},
	} {
		list, err := tc.client.List(ctx, metav1.ListOptions{FieldSelector: tc.selector})
		if err != nil {
			t.Errorf("list %s: %v", tc.selector, err)
			continue
		}
		var got []string
		for _, it := range list.Items {
			got = append(got, it.GetName())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("list %s = %v, want %v", tc.selector, got, tc.want)
		}
	}

	// Selectable fields are per version.
	if _, err := v1.List(ctx, metav1.ListOptions{FieldSelector: "host=host1"}); !apierrors.IsBadRequest(err) {
		t.Errorf("v1 list host=host1: got %v, want 400", err)
	}
	if _, err := v2.Watch(ctx, metav1.ListOptions{FieldSelector: "hostPort=host1:80"}); !apierrors.IsBadRequest(err) {
		t.Errorf("v2 watch hostPort=host1:80: got %v, want 400", err)
	}
}
