package apiserver_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// deployment is a deployment of replicas busybox pods.
func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
			},
		},
	}
}

// deploymentRules match creates and updates of deployments.
var deploymentRules = []admissionregistrationv1.NamedRuleWithOperations{{
	RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
	},
}}

func createPolicy(t *testing.T, cs kubernetes.Interface, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestValidatingAdmissionPolicy(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	createTestNamespace(t, cs, "vap")
	createTestNamespace(t, cs, "vap-param")
	createPolicy(t, cs, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "max-replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: deploymentRules, NamespaceSelector: inNamespace("vap"),
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.spec.replicas <= 5", Message: "replicas must be at most 5",
			}},
		},
	}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "max-replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "max-replicas", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	})
	deployments := cs.AppsV1().Deployments("vap")
	eventually(t, "the policy to deny", func() bool {
		_, err := deployments.Create(ctx, deployment("probe", 6), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})

	_, err := deployments.Create(ctx, deployment("big", 6), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: replicas must be at most 5") {
		t.Fatalf("create 6 replicas: %v, want 422 with the policy's message", err)
	}
	d, err := deployments.Create(ctx, deployment("small", 5), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create 5 replicas: %v", err)
	}
	d.Spec.Replicas = ptr.To[int32](7)
	if _, err := deployments.Update(ctx, d, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("update to 7 replicas: %v, want 422", err)
	}
	// Scaling through the scale subresource is a deployments/scale write:
	// the policy's rules do not name it.

	t.Run("paramKind ConfigMap", func(t *testing.T) {
		limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits"}, Data: map[string]string{"maxReplicas": "3"}}
		if _, err := cs.CoreV1().ConfigMaps("vap-param").Create(ctx, limits, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createPolicy(t, cs, &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "param-replicas"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: deploymentRules},
				Validations: []admissionregistrationv1.Validation{{
					Expression:        "object.spec.replicas <= int(params.data.maxReplicas)",
					MessageExpression: "'replicas must be at most ' + params.data.maxReplicas",
				}},
			},
		}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "param-replicas"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        "param-replicas",
				ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
				MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: inNamespace("vap-param")},
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		})
		deployments := cs.AppsV1().Deployments("vap-param")
		eventually(t, "the parameterised policy to deny", func() bool {
			_, err := deployments.Create(ctx, deployment("probe", 4), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil
		})
		_, err := deployments.Create(ctx, deployment("four", 4), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "replicas must be at most 3") {
			t.Fatalf("create 4 replicas: %v, want 422 with the message from the param", err)
		}
		if _, err := deployments.Create(ctx, deployment("three", 3), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create 3 replicas: %v", err)
		}
	})

	t.Run("malformed", func(t *testing.T) {
		bad := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: deploymentRules},
				Validations:      []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <="}},
			},
		}
		_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create a policy that does not compile: %v, want 422", err)
		}
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "max-replicas"},
		}
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create a binding without validationActions: %v, want 422", err)
		}
	})
}
