package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestHost_PolicyTypeChecking: each tenant's ValidatingAdmissionPolicy
// status controller type-checks its policies against the built-in
// schemas, which the host's tenants share (one copy in the process): a
// field Deployments lack is reported in each tenant's policy status.
func TestHost_PolicyTypeChecking(t *testing.T) {
	dir := t.TempDir()
	startTestHost(t, dir, "--disable-tenant-dns")
	ctx := ctxTimeout(t, 3*time.Minute)
	for _, name := range []string{"a", "b"} {
		kc := filepath.Join(dir, name+".kubeconfig")
		if out, err := tenantCLI(t, dir, "create", name, "--out", kc); err != nil {
			t.Fatalf("tenant create %s: %v\n%s", name, err, out)
		}
		cs := tenantClient(t, kc)
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
					},
				}}},
				Validations: []admissionregistrationv1.Validation{
					{Expression: "object.spec.replicas < 100"},
					{Expression: "object.spec.noSuchField == 1"},
				},
			},
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var warnings []admissionregistrationv1.ExpressionWarning
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			p, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy.Name, metav1.GetOptions{})
			if err != nil || p.Status.TypeChecking == nil {
				return false, nil
			}
			warnings = p.Status.TypeChecking.ExpressionWarnings
			return true, nil
		})
		if err != nil {
			t.Fatalf("tenant %s: the policy was not type-checked", name)
		}
		if len(warnings) != 1 || warnings[0].FieldRef != "spec.validations[1].expression" || !strings.Contains(warnings[0].Warning, "noSuchField") {
			t.Errorf("tenant %s: type-checking warnings %+v, want one about noSuchField in spec.validations[1]", name, warnings)
		}
	}
}
