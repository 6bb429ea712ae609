package apiserver_test

import (
	"context"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/sqlkube/sqlkube/apiserver"
)

// A fresh cluster gets every bootstrap RBAC object, priority level and
// flow schema (created at once, without the reconciler's reads); a
// bootstrap over an existing cluster (a restart) reconciles instead: what
// was deleted comes back, a default role's missing rules are put back.
func TestBootstrap_FreshThenAgain(t *testing.T) {
	ctx := context.Background()
	cfg, api := newServerWith(t, apiserver.Config{})
	cfg.QPS, cfg.Burst = 1000, 1000 // a few hundred reads follow
	cs := kubernetes.NewForConfigOrDie(cfg)

	wantRoles := append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...)
	for _, r := range wantRoles {
		got, err := cs.RbacV1().ClusterRoles().Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("clusterrole %s: %v", r.Name, err)
		}
		if r.AggregationRule == nil && len(got.Rules) != len(r.Rules) {
			t.Errorf("clusterrole %s has %d rules, want %d", r.Name, len(got.Rules), len(r.Rules))
		}
	}
	for _, b := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		if _, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, b.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("clusterrolebinding %s: %v", b.Name, err)
		}
	}
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		for _, r := range roles {
			if _, err := cs.RbacV1().Roles(ns).Get(ctx, r.Name, metav1.GetOptions{}); err != nil {
				t.Fatalf("role %s/%s: %v", ns, r.Name, err)
			}
		}
	}
	for _, pl := range append(bootstrap.MandatoryPriorityLevelConfigurations, bootstrap.SuggestedPriorityLevelConfigurations...) {
		if _, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, pl.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("priority level %s: %v", pl.Name, err)
		}
	}
	for _, fs := range append(bootstrap.MandatoryFlowSchemas, bootstrap.SuggestedFlowSchemas...) {
		got, err := cs.FlowcontrolV1().FlowSchemas().Get(ctx, fs.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("flow schema %s: %v", fs.Name, err)
		}
		dangling := ""
		for _, c := range got.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
				dangling = string(c.Status)
			}
		}
		if dangling != string(flowcontrolv1.ConditionFalse) {
			t.Errorf("flow schema %s: Dangling %q, want False", fs.Name, dangling)
		}
	}

	// What a restart's bootstrap puts back.
	if err := cs.RbacV1().ClusterRoles().Delete(ctx, "system:discovery", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	basic, err := cs.RbacV1().ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := basic.Rules
	basic.Rules = basic.Rules[:0]
	if _, err := cs.RbacV1().ClusterRoles().Update(ctx, basic, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	extra := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "operator-own"}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "system:discovery", metav1.GetOptions{}); err != nil {
		t.Errorf("a deleted default role after the second bootstrap: %v", err)
	}
	// The reconciler adds what is missing rule by rule, as upstream's:
	// the same permissions, maybe split differently.
	if basic, err = cs.RbacV1().ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if covers, missing := validation.Covers(basic.Rules, want); !covers {
		t.Errorf("system:basic-user after the second bootstrap misses %v", missing)
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "operator-own", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("the bootstrap removed an operator's own role")
	}
}
