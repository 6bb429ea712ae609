package apiserver_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/internal/testcert"
)

// conversionWebhook converts gadgets between v1 (spec.color) and v2
// (spec.colour) at /convert (ConversionReview v1), and answers what is
// not a ConversionReview at /garbage.
func conversionWebhook(t *testing.T) (url string, caBundle []byte) {
	t.Helper()
	ca, cert := testcert.Serving(t, "conversion.hooks.svc", "127.0.0.1")
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", func(w http.ResponseWriter, r *http.Request) {
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not a ConversionReview", http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			var obj map[string]any
			if err := json.Unmarshal(raw.Raw, &obj); err != nil {
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
				break
			}
			from, to := "color", "colour"
			if strings.HasSuffix(review.Request.DesiredAPIVersion, "/v1") {
				from, to = "colour", "color"
			}
			if spec, ok := obj["spec"].(map[string]any); ok {
				if v, ok := spec[from]; ok {
					spec[to] = v
					delete(spec, from)
				}
			}
			obj["apiVersion"] = review.Request.DesiredAPIVersion
			out, _ := json.Marshal(obj)
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
		}
		review.Request, review.Response = nil, resp
		writeJSON(w, review)
	})
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1","response":{"uid":"wrong"`)
	})
	hs := httptest.NewUnstartedServer(mux)
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return hs.URL, ca
}

// gadgetCRD is namespaced gadgets.GROUP, served at v1 (spec.color,
// stored) and v2 (spec.colour), converted by the webhook at url.
func gadgetCRD(group, url string, caBundle []byte) *apiextensionsv1.CustomResourceDefinition {
	version := func(name, field string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: "string"}}},
				},
			}},
		}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1", "color", true), version("v2", "colour", false)},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To(url), CABundle: caBundle},
					ConversionReviewVersions: []string{"v1"},
				},
			},
		},
	}
}

func gadget(group, version, name, field, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + version, "kind": "Gadget",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{field: value},
	}}
}

func specField(u *unstructured.Unstructured, field string) string {
	v, _, _ := unstructured.NestedString(u.Object, "spec", field)
	return v
}

func TestConversionWebhook_ReadWriteListWatch(t *testing.T) {
	ctx := context.Background()
	cfg, etcd := newServerWithStorage(t)
	url, ca := conversionWebhook(t)
	const group = "conversion.example.com"
	createEstablished(t, cfg, gadgetCRD(group, url+"/convert", ca))
	dyn := dynamic.NewForConfigOrDie(cfg)
	v1 := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}).Namespace("default")
	v2 := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v2", Resource: "gadgets"}).Namespace("default")

	created, err := v1.Create(ctx, gadget(group, "v1", "one", "color", "blue"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetAPIVersion() != group+"/v1" || specField(created, "color") != "blue" {
		t.Fatalf("created %v", created.Object)
	}
	got, err := v2.Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetAPIVersion() != group+"/v2" || specField(got, "colour") != "blue" || specField(got, "color") != "" {
		t.Fatalf("read at v2: %v", got.Object)
	}

	// Written at v2, stored at v1, read back at v1.
	unstructured.SetNestedField(got.Object, "red", "spec", "colour")
	if _, err := v2.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	back, err := v1.Get(ctx, "one", metav1.GetOptions{})
	if err != nil || specField(back, "color") != "red" {
		t.Fatalf("read at v1 after an update at v2: %v %v", err, back)
	}
	stored, err := etcd.Client.Get(ctx, "/registry/"+group+"/gadgets/default/one")
	if err != nil || len(stored.Kvs) != 1 || !strings.Contains(string(stored.Kvs[0].Value), `"apiVersion":"`+group+`/v1"`) ||
		!strings.Contains(string(stored.Kvs[0].Value), `"color":"red"`) {
		t.Fatalf("stored: %v %v", err, stored)
	}
	if _, err := v2.Create(ctx, gadget(group, "v2", "two", "colour", "green"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	list, err := v2.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list at v2: %v %v", err, list)
	}
	for _, item := range list.Items {
		if item.GetAPIVersion() != group+"/v2" || specField(&item, "colour") == "" || specField(&item, "color") != "" {
			t.Fatalf("listed at v2: %v", item.Object)
		}
	}

	w, err := v2.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := v1.Create(ctx, gadget(group, "v1", "three", "color", "violet"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		u, ok := ev.Object.(*unstructured.Unstructured)
		if ev.Type != watch.Added || !ok || u.GetName() != "three" || u.GetAPIVersion() != group+"/v2" || specField(u, "colour") != "violet" {
			t.Fatalf("watched at v2: %s %v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}
}

// TestConversionWebhook_Malformed: a webhook answering what is not a
// ConversionReview, or not answering, makes reads at the other version
// fail with a Status, while the storage version still serves.
func TestConversionWebhook_Malformed(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	url, ca := conversionWebhook(t)
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, c := range []struct{ group, url string }{
		{"garbage.example.com", url + "/garbage"},
		{"down.example.com", "https://127.0.0.1:1/convert"},
	} {
		t.Run(c.group, func(t *testing.T) {
			createEstablished(t, cfg, gadgetCRD(c.group, c.url, ca))
			v1 := dyn.Resource(schema.GroupVersionResource{Group: c.group, Version: "v1", Resource: "gadgets"}).Namespace("default")
			v2 := dyn.Resource(schema.GroupVersionResource{Group: c.group, Version: "v2", Resource: "gadgets"}).Namespace("default")
			if _, err := v1.Create(ctx, gadget(c.group, "v1", "one", "color", "blue"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := v1.Get(ctx, "one", metav1.GetOptions{}); err != nil {
				t.Fatalf("read at the storage version: %v", err)
			}
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := v2.Get(ctx, "one", metav1.GetOptions{})
			var status apierrors.APIStatus
			if err == nil || !errors.As(err, &status) || status.Status().Code < 400 {
				t.Fatalf("read at v2: %v, want an error Status", err)
			}
			_, err = v2.Create(ctx, gadget(c.group, "v2", "two", "colour", "green"), metav1.CreateOptions{})
			if err == nil || !errors.As(err, &status) || status.Status().Code < 400 {
				t.Fatalf("write at v2: %v, want an error Status", err)
			}
		})
	}
}
