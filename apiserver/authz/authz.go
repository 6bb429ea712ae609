package authz

import (
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/client-go/informers"
	rbacvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

// Authorization modes.
const (
	ModeRBAC        = "RBAC"
	ModeAlwaysAllow = "AlwaysAllow"
)

// Authorizer is the server's authorizer and what answers "what may this
// user do" (SelfSubjectRulesReview).
type Authorizer struct {
	authorizer.Authorizer
	// Rules lists a user's rules (SelfSubjectRulesReview).
	Rules authorizer.RuleResolver
	// resolver finds a user's RBAC rules, for escalation checks; nil
	// without RBAC.
	resolver *rbacvalidation.DefaultRuleResolver
}

// New builds the authorizer of mode: members of system:masters may do
// anything, then Kubernetes' Node authorizer (node.go) for
// nodes' own objects, then RBAC over the cluster's roles and bindings
// (read from informers), kube-apiserver's default Node,RBAC order; or
// everything for AlwaysAllow.
func New(mode string, factory informers.SharedInformerFactory) (*Authorizer, error) {
	masters := authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)
	switch mode {
	case ModeAlwaysAllow:
		allow := authorizerfactory.NewAlwaysAllowAuthorizer()
		return &Authorizer{Authorizer: allow, Rules: allow}, nil
	case ModeRBAC, "":
		rbacv1 := factory.Rbac().V1()
		roles := &rbac.RoleGetter{Lister: rbacv1.Roles().Lister()}
		roleBindings := &rbac.RoleBindingLister{Lister: rbacv1.RoleBindings().Lister()}
		clusterRoles := &rbac.ClusterRoleGetter{Lister: rbacv1.ClusterRoles().Lister()}
		clusterRoleBindings := &rbac.ClusterRoleBindingLister{Lister: rbacv1.ClusterRoleBindings().Lister()}
		r := rbac.New(roles, roleBindings, clusterRoles, clusterRoleBindings)
		nodes := newNodeAuthorizer(factory)
		union, err := authzunion.New(
			authzunion.NamedAuthorizer{AuthorizerName: "kubernetes.io/system-privileged-group", Authorizer: masters},
			authzunion.NamedAuthorizer{AuthorizerName: "node", Authorizer: nodes},
			authzunion.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: r},
		)
		if err != nil {
			return nil, err
		}
		return &Authorizer{
			Authorizer: union, Rules: authzunion.NewRuleResolvers(nodes, r),
			resolver: rbacvalidation.NewDefaultRuleResolver(roles, roleBindings, clusterRoles, clusterRoleBindings),
		}, nil
	}
	return nil, errUnknownAuthorizationMode(mode)
}

type errUnknownAuthorizationMode string

func (e errUnknownAuthorizationMode) Error() string {
	return "apiserver: unknown authorization mode " + string(e) + " (want RBAC or AlwaysAllow)"
}
