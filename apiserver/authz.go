package apiserver

import (
	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/informers"
	rbacvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

// Authorization modes.
const (
	AuthorizationRBAC        = "RBAC"
	AuthorizationAlwaysAllow = "AlwaysAllow"
)

// authz is the server's authorizer and what answers "what may this user
// do" (SelfSubjectRulesReview).
type authz struct {
	authorizer.Authorizer
	rules authorizer.RuleResolver
	// resolver finds a user's RBAC rules, for escalation checks; nil
	// without RBAC.
	resolver *rbacvalidation.DefaultRuleResolver
}

// newAuthorizer builds the authorizer of mode: members of system:masters
// may do anything, then Kubernetes' Node authorizer (authz_node.go) for
// nodes' own objects, then RBAC over the cluster's roles and bindings
// (read from informers), kube-apiserver's default Node,RBAC order; or
// everything for AlwaysAllow.
func newAuthorizer(mode string, factory informers.SharedInformerFactory) (*authz, error) {
	masters := authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)
	switch mode {
	case AuthorizationAlwaysAllow:
		allow := authorizerfactory.NewAlwaysAllowAuthorizer()
		return &authz{Authorizer: allow, rules: allow}, nil
	case AuthorizationRBAC, "":
		rbacv1 := factory.Rbac().V1()
		roles := &rbac.RoleGetter{Lister: rbacv1.Roles().Lister()}
		roleBindings := &rbac.RoleBindingLister{Lister: rbacv1.RoleBindings().Lister()}
		clusterRoles := &rbac.ClusterRoleGetter{Lister: rbacv1.ClusterRoles().Lister()}
		clusterRoleBindings := &rbac.ClusterRoleBindingLister{Lister: rbacv1.ClusterRoleBindings().Lister()}
		r := rbac.New(roles, roleBindings, clusterRoles, clusterRoleBindings)
		nodes := newNodeAuthorizer(factory)
		return &authz{
			Authorizer: authzunion.New(masters, nodes, r), rules: authzunion.NewRuleResolvers(nodes, r),
			resolver: rbacvalidation.NewDefaultRuleResolver(roles, roleBindings, clusterRoles, clusterRoleBindings),
		}, nil
	}
	return nil, errUnknownAuthorizationMode(mode)
}

type errUnknownAuthorizationMode string

func (e errUnknownAuthorizationMode) Error() string {
	return "apiserver: unknown authorization mode " + string(e) + " (want RBAC or AlwaysAllow)"
}

// authorize lets a request through only if the authorizer allows its
// verb on its resource or path (403 Forbidden, worded as kube-apiserver
// words it, otherwise). publicPaths need no authorization.
func (s *Server) authorize(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if publicPaths[req.URL.Path] {
			return next(c)
		}
		info, err := requestInfoOf(req)
		if err != nil {
			return responses.Status(c, apierrors.NewBadRequest(err.Error()))
		}
		ctx := request.WithRequestInfo(req.Context(), info)
		attrs, err := filters.GetAuthorizerAttributes(ctx)
		if err != nil {
			return responses.Status(c, apierrors.NewInternalError(err))
		}
		decision, reason, err := s.authz.Authorize(ctx, attrs)
		if decision != authorizer.DecisionAllow {
			if err != nil && reason == "" {
				reason = err.Error()
			}
			return responses.Status(c, responsewriters.ForbiddenStatusError(attrs, reason))
		}
		c.SetRequest(req.WithContext(ctx))
		return next(c)
	}
}
