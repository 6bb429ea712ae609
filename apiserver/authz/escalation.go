package authz

import (
	"context"
	"errors"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacregistry "k8s.io/kubernetes/pkg/registry/rbac"
	rbacvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
)

// fullAuthority is what setting an aggregationRule takes: it can gather
// anything.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// CheckEscalation refuses (403) a role or binding that would grant its
// writer rights the writer does not hold, as kube-apiserver's RBAC storage
// does:
//   - roles and cluster roles: every rule must already be the writer's (in
//     the role's namespace), unless the writer may `escalate` roles; an
//     aggregationRule takes cluster-admin;
//   - bindings: the writer must hold every rule of the referenced role,
//     unless the writer may `bind` it.
//
// Members of system:masters may do anything; without RBAC (AlwaysAllow)
// there is nothing to check. old is nil on create; an update that changes
// only what garbage collection changes (owners, finalizers) is not checked.
func (a *Authorizer) CheckEscalation(ctx context.Context, gr schema.GroupResource, obj, old runtime.Object) error {
	resolver := a.resolver
	if resolver == nil || gr.Group != rbacv1.GroupName || rbacregistry.EscalationAllowed(ctx) {
		return nil
	}
	if old != nil && onlyGCFieldsChanged(obj, old) {
		return nil
	}
	switch o := obj.(type) {
	case *rbacv1.Role:
		if rbacregistry.RoleEscalationAuthorized(ctx, a) {
			return nil
		}
		return confirmNoEscalation(ctx, resolver, gr, o.Name, o.Rules)
	case *rbacv1.ClusterRole:
		if rbacregistry.RoleEscalationAuthorized(ctx, a) {
			return nil
		}
		if err := confirmNoEscalation(ctx, resolver, gr, o.Name, o.Rules); err != nil {
			return err
		}
		oldRole, _ := old.(*rbacv1.ClusterRole)
		if hasAggregationRule(o) || oldRole != nil && hasAggregationRule(oldRole) {
			if rbacvalidation.ConfirmNoEscalation(ctx, resolver, fullAuthority) != nil {
				return apierrors.NewForbidden(gr, o.Name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
			}
		}
		return nil
	case *rbacv1.RoleBinding:
		return a.checkBinding(ctx, resolver, gr, o.Name, o.RoleRef, o.Namespace)
	case *rbacv1.ClusterRoleBinding:
		return a.checkBinding(ctx, resolver, gr, o.Name, o.RoleRef, "")
	}
	return nil
}

func (a *Authorizer) checkBinding(ctx context.Context, resolver *rbacvalidation.DefaultRuleResolver, gr schema.GroupResource, name string, ref rbacv1.RoleRef, namespace string) error {
	internalRef := rbac.RoleRef{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
	if rbacregistry.BindingAuthorized(ctx, internalRef, namespace, a) {
		return nil
	}
	rules, err := resolver.GetRoleReferenceRules(ctx, ref, namespace)
	if err != nil && !apierrors.IsNotFound(err) {
		return apierrors.NewInternalError(err)
	}
	return confirmNoEscalation(ctx, resolver, gr, name, rules)
}

func confirmNoEscalation(ctx context.Context, resolver *rbacvalidation.DefaultRuleResolver, gr schema.GroupResource, name string, rules []rbacv1.PolicyRule) error {
	if err := rbacvalidation.ConfirmNoEscalation(ctx, resolver, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return nil
}

func hasAggregationRule(r *rbacv1.ClusterRole) bool {
	return r.AggregationRule != nil && len(r.AggregationRule.ClusterRoleSelectors) > 0
}

// onlyGCFieldsChanged reports whether an update changes nothing but
// ownerReferences and finalizers (and what the server maintains).
func onlyGCFieldsChanged(obj, old runtime.Object) bool {
	a, b := obj.DeepCopyObject(), old.DeepCopyObject()
	for _, o := range []runtime.Object{a, b} {
		m, err := meta.Accessor(o)
		if err != nil {
			return false
		}
		m.SetOwnerReferences(nil)
		m.SetFinalizers(nil)
		m.SetResourceVersion("")
		m.SetManagedFields(nil)
		m.SetGeneration(0)
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
