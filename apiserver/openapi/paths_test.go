package openapi

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
)

func TestOperationIDs(t *testing.T) {
	b := builder(t)
	type want struct{ path, method, id, action string }
	cases := map[string][]want{
		"api/v1": {
			{"/api/v1/namespaces/{namespace}/pods", "get", "listCoreV1NamespacedPod", "list"},
			{"/api/v1/namespaces/{namespace}/pods", "post", "createCoreV1NamespacedPod", "post"},
			{"/api/v1/namespaces/{namespace}/pods", "delete", "deleteCoreV1CollectionNamespacedPod", "deletecollection"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "get", "readCoreV1NamespacedPod", "get"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "put", "replaceCoreV1NamespacedPod", "put"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "delete", "deleteCoreV1NamespacedPod", "delete"},
			{"/api/v1/namespaces/{namespace}/pods/{name}/status", "patch", "patchCoreV1NamespacedPodStatus", "patch"},
			{"/api/v1/namespaces/{namespace}/pods/{name}/binding", "post", "createCoreV1NamespacedPodBinding", "post"},
			{"/api/v1/namespaces/{namespace}/pods/{name}/eviction", "post", "createCoreV1NamespacedPodEviction", "post"},
			{"/api/v1/pods", "get", "listCoreV1PodForAllNamespaces", "list"},
			{"/api/v1/watch/namespaces/{namespace}/pods", "get", "watchCoreV1NamespacedPodList", "watchlist"},
			{"/api/v1/watch/namespaces/{namespace}/pods/{name}", "get", "watchCoreV1NamespacedPod", "watch"},
			{"/api/v1/watch/pods", "get", "watchCoreV1PodListForAllNamespaces", "watchlist"},
			{"/api/v1/nodes/{name}", "get", "readCoreV1Node", "get"},
			{"/api/v1/watch/nodes", "get", "watchCoreV1NodeList", "watchlist"},
			{"/api/v1/namespaces/{name}/status", "put", "replaceCoreV1NamespaceStatus", "put"},
			{"/api/v1/", "get", "getCoreV1APIResources", ""},
		},
		"apis/apps/v1": {
			{"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale", "get", "readAppsV1NamespacedDeploymentScale", "get"},
		},
		"apis/rbac.authorization.k8s.io/v1": {
			{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "get", "listRbacAuthorizationV1ClusterRole", "list"},
		},
	}
	for key, wants := range cases {
		body, _, _ := b.V3Doc(key)
		doc := &spec3.OpenAPI{}
		if err := json.Unmarshal(body, doc); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, w := range wants {
			p := doc.Paths.Paths[w.path]
			if p == nil {
				t.Errorf("%s: no path %s", key, w.path)
				continue
			}
			op := map[string]*spec3.Operation{"get": p.Get, "post": p.Post, "put": p.Put, "patch": p.Patch, "delete": p.Delete}[w.method]
			if op == nil {
				t.Errorf("%s %s: missing", w.method, w.path)
				continue
			}
			if op.OperationId != w.id {
				t.Errorf("%s %s: operationId %s, want %s", w.method, w.path, op.OperationId, w.id)
			}
			if got, _ := op.Extensions.GetString(extAction); got != w.action {
				t.Errorf("%s %s: action %q, want %q", w.method, w.path, got, w.action)
			}
		}
	}
	core, _, _ := b.V3Doc("api/v1")
	doc := &spec3.OpenAPI{}
	_ = json.Unmarshal(core, doc)
	eviction := doc.Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}/eviction"].Post
	if !hasGVK([]interface{}{eviction.Extensions[extGVK]}, policyv1.SchemeGroupVersion.WithKind("Eviction")) {
		t.Errorf("eviction GVK = %v", eviction.Extensions[extGVK])
	}
	if tags := doc.Paths.Paths["/api/v1/nodes"].Get.Tags; len(tags) != 1 || tags[0] != "core_v1" {
		t.Errorf("tags = %v", tags)
	}
}

func TestNewBuilderRejectsBadInput(t *testing.T) {
	bad := []Resource{
		{GVK: coreGVK("Pod"), Plural: "pods", Verbs: []string{"frobnicate"}, Object: &corev1.Pod{}},
		{GVK: coreGVK("Pod"), Plural: "pods", Verbs: []string{"list"}, Object: &corev1.Pod{}},
		{GVK: coreGVK("Pod"), Verbs: []string{"get"}, Object: &corev1.Pod{}},
	}
	for i, r := range bad {
		if _, err := NewBuilder([]Resource{r}, testInfo); err == nil {
			t.Errorf("case %d: NewBuilder accepted %+v", i, r)
		}
	}
}

func TestUnstructuredResource(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	b, err := NewBuilder([]Resource{{GVK: gvk, Plural: "widgets", Namespaced: true, Verbs: allVerbs,
		Object: &unstructured.Unstructured{}, List: &unstructured.UnstructuredList{}}}, testInfo)
	if err != nil {
		t.Fatal(err)
	}
	def := b.Definitions()["io.k8s.apimachinery.pkg.apis.meta.v1.unstructured.Unstructured"]
	if def == nil || def.Extensions[extPreserveUnknown] != true || !hasGVK(def.Extensions[extGVK], gvk) {
		t.Fatalf("Unstructured definition = %+v", def)
	}
	if _, _, ok := b.V3Doc("apis/example.com/v1"); !ok {
		t.Error("no v3 document for example.com/v1")
	}
	tc, err := managedfields.NewTypeConverter(b.Definitions(), false)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]interface{}{"name": "w"}, "spec": map[string]interface{}{"size": int64(3)},
	}}
	if _, err := tc.ObjectToTyped(u); err != nil {
		t.Errorf("ObjectToTyped(widget): %v", err)
	}
}
