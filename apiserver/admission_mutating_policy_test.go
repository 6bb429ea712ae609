package apiserver_test

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestMutatingAdmissionPolicy: a MutatingAdmissionPolicy and its binding
// mutate the config maps created in the bound namespace, as kube-apiserver
// 1.37's default-on MutatingAdmissionPolicy plugin does: an
// ApplyConfiguration (merged with the type converter of the server's own
// OpenAPI) adds a label, a JSONPatch an annotation that reads the request
// (its user); what is stored is the mutated object, and config maps in
// other namespaces and updates (not in the policy's rules) are left
// alone.
func TestMutatingAdmissionPolicy(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	createTestNamespace(t, cs, "map")
	createTestNamespace(t, cs, "map-other")
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "label-config-maps"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			Mutations: []admissionregistrationv1.Mutation{
				{
					PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
						Expression: `Object{metadata: Object.metadata{labels: {"mutated-by": "policy"}}}`,
					},
				},
				{
					PatchType: admissionregistrationv1.PatchTypeJSONPatch,
					JSONPatch: &admissionregistrationv1.JSONPatch{
						Expression: `[JSONPatch{op: "add", path: "/metadata/annotations", value: {"created-by": request.userInfo.username}}]`,
					},
				},
			},
		},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "label-config-maps"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName:     "label-config-maps",
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: inNamespace("map")},
		},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	configMaps := cs.CoreV1().ConfigMaps("map")
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
	}
	eventually(t, "the policy to mutate", func() bool {
		got, err := configMaps.Create(ctx, cm("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Labels["mutated-by"] == "policy"
	})

	created, err := configMaps.Create(ctx, cm("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := configMaps.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []*corev1.ConfigMap{created, stored} {
		if got.Labels["mutated-by"] != "policy" || got.Annotations["created-by"] != "system:unsecured" || got.Data["k"] != "v" {
			t.Errorf("created config map: labels %v, annotations %v, data %v; want the policy's label and annotation, data kept", got.Labels, got.Annotations, got.Data)
		}
	}

	// Updates are not in the policy's rules.
	stored.Labels = map[string]string{"mutated-by": "hand"}
	updated, err := configMaps.Update(ctx, stored, metav1.UpdateOptions{})
	if err != nil || updated.Labels["mutated-by"] != "hand" {
		t.Errorf("update: %v, labels %v; want the update's label", err, updated.GetLabels())
	}
	// Nor are other namespaces in the binding's.
	other, err := cs.CoreV1().ConfigMaps("map-other").Create(ctx, cm("web"), metav1.CreateOptions{})
	if err != nil || len(other.Labels) != 0 || len(other.Annotations) != 0 {
		t.Errorf("config map in another namespace: %v, labels %v, annotations %v; want none", err, other.GetLabels(), other.GetAnnotations())
	}
}
