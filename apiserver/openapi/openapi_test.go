package openapi

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util/proto"
)

func TestV2ParsesWithProtoModels(t *testing.T) {
	b := builder(t)
	doc, err := openapi_v2.ParseDocument(b.V2JSON())
	if err != nil {
		t.Fatalf("ParseDocument: %v", err)
	}
	models, err := proto.NewOpenAPIData(doc)
	if err != nil {
		t.Fatalf("NewOpenAPIData: %v", err)
	}
	var pod proto.Schema
	for _, name := range models.ListModels() {
		m := models.LookupModel(name)
		if hasGVK(m.GetExtensions()[extGVK], coreGVK("Pod")) {
			pod = m
		}
	}
	if pod == nil {
		t.Fatal("no model carries the v1 Pod GVK")
	}
	podKind, ok := pod.(*proto.Kind)
	if !ok {
		t.Fatalf("Pod model is %T, want *proto.Kind", pod)
	}
	spec, ok := deref(podKind.Fields["spec"]).(*proto.Kind)
	if !ok {
		t.Fatalf("Pod.spec is %T", podKind.Fields["spec"])
	}
	containers, ok := spec.Fields["containers"].(*proto.Array)
	if !ok {
		t.Fatalf("spec.containers is %T, want array", spec.Fields["containers"])
	}
	container, ok := deref(containers.SubType).(*proto.Kind)
	if !ok {
		t.Fatalf("containers item is %T", containers.SubType)
	}
	for _, f := range []string{"name", "image"} {
		if _, ok := container.Fields[f]; !ok {
			t.Errorf("Container has no field %q", f)
		}
	}
	if !container.IsRequired("name") {
		t.Error("Container.name should be required")
	}
	checkRefs(t, "v2", b.V2JSON(), "#/definitions/", "definitions")
}

// checkRefs asserts that every $ref in the JSON document resolves to an
// entry of the section named by path (e.g. "components/schemas").
func checkRefs(t *testing.T, label string, body []byte, prefix, section string) {
	t.Helper()
	var doc map[string]interface{}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	var defs map[string]interface{}
	node := interface{}(doc)
	for _, p := range strings.Split(section, "/") {
		node = node.(map[string]interface{})[p]
	}
	defs = node.(map[string]interface{})
	count := 0
	var walk func(v interface{})
	walk = func(v interface{}) {
		switch v := v.(type) {
		case map[string]interface{}:
			if ref, ok := v["$ref"].(string); ok {
				count++
				if !strings.HasPrefix(ref, prefix) || defs[strings.TrimPrefix(ref, prefix)] == nil {
					t.Errorf("%s: unresolved $ref %q", label, ref)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []interface{}:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	if count == 0 {
		t.Errorf("%s: no $ref at all", label)
	}
}

func TestV3IndexAndDocuments(t *testing.T) {
	b := builder(t)
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(b.V3Index(), &index); err != nil {
		t.Fatalf("index: %v", err)
	}
	want := []string{"api/v1", "apis/apps/v1", "apis/batch/v1", "apis/rbac.authorization.k8s.io/v1"}
	if len(index.Paths) != len(want) {
		t.Errorf("index has %d entries, want %v", len(index.Paths), want)
	}
	docs := map[string]*spec3.OpenAPI{}
	for _, key := range want {
		entry, ok := index.Paths[key]
		if !ok {
			t.Errorf("index lacks %s", key)
			continue
		}
		u, err := url.Parse(entry.ServerRelativeURL)
		if err != nil || u.Path != "/openapi/v3/"+key {
			t.Errorf("%s: bad serverRelativeURL %q", key, entry.ServerRelativeURL)
			continue
		}
		body, hash, found := b.V3Doc(key)
		if !found {
			t.Errorf("V3Doc(%q) not found", key)
			continue
		}
		if got := u.Query().Get("hash"); got != hash {
			t.Errorf("%s: index hash %s != doc hash %s", key, got, hash)
		}
		if sum := fmt.Sprintf("%X", sha512.Sum512(body)); sum != hash {
			t.Errorf("%s: hash is not the SHA-512 of the body", key)
		}
		doc := &spec3.OpenAPI{}
		if err := json.Unmarshal(body, doc); err != nil {
			t.Fatalf("%s: unmarshal spec3: %v", key, err)
		}
		docs[key] = doc
		checkRefs(t, key, body, "#/components/schemas/", "components/schemas")
		for p := range doc.Paths.Paths {
			if !strings.HasPrefix(p, "/"+key+"/") {
				t.Errorf("%s contains foreign path %s", key, p)
			}
		}
	}
	if _, _, found := b.V3Doc("apis/nope/v1"); found {
		t.Error("V3Doc found an unknown group-version")
	}

	apps := docs["apis/apps/v1"]
	if apps == nil {
		t.FailNow()
	}
	deployGVK := appsv1.SchemeGroupVersion.WithKind("Deployment")
	post := apps.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/deployments"].Post
	if post == nil {
		t.Fatal("no POST on deployments")
	}
	checkFieldValidation(t, "POST deployments", post, deployGVK)
	item := apps.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
	checkFieldValidation(t, "PUT deployment", item.Put, deployGVK)
	checkFieldValidation(t, "PATCH deployment", item.Patch, deployGVK)
	scale := apps.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]
	checkFieldValidation(t, "PATCH scale", scale.Patch, autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	if apps.Components.Schemas["io.k8s.api.autoscaling.v1.Scale"] == nil {
		t.Error("apps/v1 doc lacks the Scale schema")
	}
	if apps.Components.Schemas["io.k8s.api.core.v1.Pod"] != nil {
		t.Error("apps/v1 doc should not carry the Pod schema")
	}
	checkFieldValidation(t, "PATCH pod", docs["api/v1"].Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}"].Patch, coreGVK("Pod"))
}

// checkFieldValidation asserts op has a fieldValidation query parameter and
// the given x-kubernetes-group-version-kind, which is what kubectl looks for.
func checkFieldValidation(t *testing.T, label string, op *spec3.Operation, gvk schema.GroupVersionKind) {
	t.Helper()
	if op == nil {
		t.Errorf("%s: missing operation", label)
		return
	}
	found := false
	for _, p := range op.Parameters {
		if p.Name == "fieldValidation" && p.In == "query" {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: no fieldValidation query parameter", label)
	}
	if !hasGVK([]interface{}{op.Extensions[extGVK]}, gvk) {
		t.Errorf("%s: x-kubernetes-group-version-kind = %v, want %v", label, op.Extensions[extGVK], gvk)
	}
}

// testPod returns a Pod with two containers, ports (one relying on the
// protocol default) and env.
func testPod(containerNames ...string) *corev1.Pod {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"app": "x"}},
	}
	for _, name := range containerNames {
		c := corev1.Container{
			Name:  name,
			Image: "img-" + name,
			Ports: []corev1.ContainerPort{{ContainerPort: 8000 + int32(name[0]), Protocol: corev1.ProtocolTCP}, {ContainerPort: 9090}},
			Env:   []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: name}},
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	return pod
}

func TestTypeConverter(t *testing.T) {
	b := builder(t)
	tc, err := managedfields.NewTypeConverter(b.Definitions(), false)
	if err != nil {
		t.Fatalf("NewTypeConverter: %v", err)
	}
	ab, err := tc.ObjectToTyped(testPod("a", "b"))
	if err != nil {
		t.Fatalf("ObjectToTyped(pod): %v", err)
	}
	ba, err := tc.ObjectToTyped(testPod("b", "a"))
	if err != nil {
		t.Fatalf("ObjectToTyped(reordered pod): %v", err)
	}
	cmp, err := ab.Compare(ba)
	if err != nil {
		t.Fatalf("Compare: %v", err)
	}
	if !cmp.IsSame() {
		t.Errorf("pods differing only in container order compare different: %v", cmp)
	}

	// Containers are a map keyed by name: merging a pod with container "a"
	// and one with container "c" keeps both.
	onlyA, err := tc.ObjectToTyped(testPod("a"))
	if err != nil {
		t.Fatal(err)
	}
	onlyC, err := tc.ObjectToTyped(testPod("c"))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := onlyA.Merge(onlyC)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	obj, err := tc.TypedToObject(merged)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(obj)
	var mergedPod corev1.Pod
	if err := json.Unmarshal(data, &mergedPod); err != nil {
		t.Fatal(err)
	}
	if n := len(mergedPod.Spec.Containers); n != 2 {
		t.Errorf("merged pod has %d containers, want 2 (containers must be a list-map)", n)
	}

	replicas := int32(2)
	deploy := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: testPod("a", "b").Spec},
		},
	}
	if _, err := tc.ObjectToTyped(deploy); err != nil {
		t.Errorf("ObjectToTyped(deployment): %v", err)
	}
}

func TestDescriptions(t *testing.T) {
	defs := builder(t).Definitions()
	pod := defs["io.k8s.api.core.v1.Pod"]
	if pod == nil {
		t.Fatal("no Pod definition")
	}
	if want := (corev1.Pod{}).SwaggerDoc()[""]; pod.Description == "" || pod.Description != want {
		t.Errorf("Pod description = %q, want %q", pod.Description, want)
	}
	if d := defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].Properties["name"].Description; d == "" {
		t.Error("ObjectMeta.name has no description")
	}
	if d := pod.Properties["apiVersion"].Description; d != (metav1.TypeMeta{}).SwaggerDoc()["apiVersion"] {
		t.Errorf("Pod.apiVersion description = %q", d)
	}
	if !hasGVK(pod.Extensions[extGVK], coreGVK("Pod")) {
		t.Errorf("Pod GVK extension = %v", pod.Extensions[extGVK])
	}
	ports := defs["io.k8s.api.core.v1.Container"].Properties["ports"]
	if lt, _ := ports.Extensions.GetString(extListType); lt != "map" {
		t.Errorf("Container.ports list type = %q", lt)
	}
	if keys := fmt.Sprint(ports.Extensions[extListMapKeys]); keys != "[containerPort protocol]" {
		t.Errorf("Container.ports keys = %s", keys)
	}
	if lt, _ := defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].Properties["finalizers"].Extensions.GetString(extListType); lt != "set" {
		t.Errorf("finalizers list type = %q", lt)
	}
	if ios := defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]; ios == nil || ios.Format != "int-or-string" {
		t.Errorf("IntOrString = %+v", ios)
	}
	if tm := defs["io.k8s.apimachinery.pkg.apis.meta.v1.Time"]; tm == nil || tm.Format != "date-time" {
		t.Errorf("Time = %+v", tm)
	}
	if req := defs["io.k8s.api.core.v1.PodSpec"].Required; fmt.Sprint(req) != "[containers]" {
		t.Errorf("PodSpec required = %v", req)
	}
	if req := pod.Required; len(req) != 0 {
		t.Errorf("Pod required = %v", req)
	}
	// Which fields are required is upstream's (+optional comments), not
	// what omitempty suggests: DeploymentSpec.selector is a pointer and
	// required.
	if req := defs["io.k8s.api.apps.v1.DeploymentSpec"].Required; fmt.Sprint(req) != "[selector template]" {
		t.Errorf("DeploymentSpec required = %v, want kube-apiserver's [selector template]", req)
	}
	if !hasGVK(defs["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"].Extensions[extGVK], schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DeleteOptions"}) {
		t.Error("DeleteOptions lacks the apps/v1 GVK")
	}
}

func TestDeterministic(t *testing.T) {
	a := builder(t)
	b, err := NewBuilder(testResources(), testInfo)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.V2JSON(), b.V2JSON()) {
		t.Error("V2JSON differs between builds")
	}
	if !bytes.Equal(a.V3Index(), b.V3Index()) {
		t.Error("V3Index differs between builds")
	}
	for key := range a.v3 {
		x, hx, _ := a.V3Doc(key)
		y, hy, _ := b.V3Doc(key)
		if !bytes.Equal(x, y) || hx != hy {
			t.Errorf("V3Doc(%s) differs between builds", key)
		}
	}
}
