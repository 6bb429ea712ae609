package openapi

import (
	"fmt"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/util/proto"
)

var (
	allVerbs    = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	statusVerbs = []string{"get", "update", "patch"}
)

func coreGVK(kind string) schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind(kind) }

// testResources is a representative set of built-in resources.
func testResources() []Resource {
	status := Subresource{Name: "status", Verbs: statusVerbs}
	return []Resource{
		{GVK: coreGVK("Pod"), Plural: "pods", Namespaced: true, Verbs: allVerbs,
			Object: &corev1.Pod{}, List: &corev1.PodList{},
			Subresources: []Subresource{
				status,
				{Name: "binding", Verbs: []string{"create"}, GVK: coreGVK("Binding"), Object: &corev1.Binding{}},
				{Name: "eviction", Verbs: []string{"create"}, GVK: policyv1.SchemeGroupVersion.WithKind("Eviction"), Object: &policyv1.Eviction{}},
			}},
		{GVK: coreGVK("Node"), Plural: "nodes", Verbs: allVerbs, Object: &corev1.Node{}, List: &corev1.NodeList{},
			Subresources: []Subresource{status}},
		{GVK: coreGVK("Namespace"), Plural: "namespaces", Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
			Object: &corev1.Namespace{}, List: &corev1.NamespaceList{}, Subresources: []Subresource{status}},
		{GVK: coreGVK("ConfigMap"), Plural: "configmaps", Namespaced: true, Verbs: allVerbs,
			Object: &corev1.ConfigMap{}, List: &corev1.ConfigMapList{}},
		{GVK: coreGVK("Service"), Plural: "services", Namespaced: true, Verbs: allVerbs,
			Object: &corev1.Service{}, List: &corev1.ServiceList{}, Subresources: []Subresource{status}},
		{GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), Plural: "deployments", Namespaced: true, Verbs: allVerbs,
			Object: &appsv1.Deployment{}, List: &appsv1.DeploymentList{},
			Subresources: []Subresource{status,
				{Name: "scale", Verbs: statusVerbs, GVK: autoscalingv1.SchemeGroupVersion.WithKind("Scale"), Object: &autoscalingv1.Scale{}}}},
		{GVK: batchv1.SchemeGroupVersion.WithKind("Job"), Plural: "jobs", Namespaced: true, Verbs: allVerbs,
			Object: &batchv1.Job{}, List: &batchv1.JobList{}, Subresources: []Subresource{status}},
		{GVK: rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), Plural: "clusterroles", Verbs: allVerbs,
			Object: &rbacv1.ClusterRole{}, List: &rbacv1.ClusterRoleList{}},
	}
}

var testInfo = Info{Title: "Kubernetes", Version: "v1.34.2"}

var (
	sharedOnce    sync.Once
	sharedBuilder *Builder
	sharedErr     error
)

// builder returns a Builder for testResources, built once per test binary.
func builder(t *testing.T) *Builder {
	t.Helper()
	sharedOnce.Do(func() { sharedBuilder, sharedErr = NewBuilder(testResources(), testInfo) })
	if sharedErr != nil {
		t.Fatalf("NewBuilder: %v", sharedErr)
	}
	return sharedBuilder
}

// hasGVK reports whether a parsed x-kubernetes-group-version-kind list
// (from YAML or JSON) contains gvk.
func hasGVK(ext interface{}, gvk schema.GroupVersionKind) bool {
	list, _ := ext.([]interface{})
	for _, item := range list {
		m := map[string]interface{}{}
		switch v := item.(type) {
		case map[string]interface{}:
			m = v
		case map[interface{}]interface{}:
			for k, val := range v {
				m[fmt.Sprint(k)] = val
			}
		}
		if m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind {
			return true
		}
	}
	return false
}

// deref follows proto references.
func deref(s proto.Schema) proto.Schema {
	for {
		r, ok := s.(proto.Reference)
		if !ok {
			return s
		}
		s = r.SubSchema()
	}
}
