package apiserver

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericserver "k8s.io/apiserver/pkg/server"
	genericcontrollermanager "k8s.io/controller-manager/app"
)

// componentOpenPaths are the paths of a component's endpoint that anyone
// may read: upstream's DelegatingAuthorizationOptions.AlwaysAllowPaths.
var componentOpenPaths = []string{"/healthz", "/readyz", "/livez"}

// ComponentHandler guards h, the endpoint of an in-process component (the
// controller manager's on 10257, the scheduler's on 10259), as
// kube-controller-manager and kube-scheduler guard theirs, with upstream's
// handler chain (k8s.io/controller-manager/app.BuildHandlerChain) and the
// answers they would get from this API server, asked in process instead
// of over TokenReview and SubjectAccessReview:
//   - a caller is who this server's authenticators say (a client
//     certificate of its client CA, one of its tokens); one with no
//     credentials is system:anonymous, as upstream's delegating
//     authentication allows, and one with bad credentials is refused
//     (401);
//   - /healthz, /readyz and /livez are open to all and system:masters may
//     do anything (upstream's AlwaysAllowPaths and AlwaysAllowGroups);
//   - everyone else is authorized by this server's authorizer: reading
//     /metrics takes `get` on the non-resource URL /metrics.
//
// The chain needs the TLS connection's verified client certificates: serve
// h over TLS asking for certificates of this server's client CA.
func (s *Server) ComponentHandler(h http.Handler) http.Handler {
	authn := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if s.authn == nil {
			return nil, false, nil
		}
		return s.authn.AuthenticateRequest(req)
	})
	authz := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if !a.IsResourceRequest() && slices.Contains(componentOpenPaths, a.GetPath()) {
			return authorizer.DecisionAllow, "", nil
		}
		if u := a.GetUser(); u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
			return authorizer.DecisionAllow, "", nil
		}
		if s.api.Authz == nil {
			return authorizer.DecisionNoOpinion, "authorizer not started", nil
		}
		return s.api.Authz.Authorize(ctx, a)
	})
	return genericcontrollermanager.BuildHandlerChain(h,
		&genericserver.AuthorizationInfo{Authorizer: authz},
		&genericserver.AuthenticationInfo{Authenticator: union.NewFailOnError(authn, anonymous.NewAuthenticator(nil))})
}

// ComponentMetricsHandler serves, in Prometheus' text format, the metric
// families of the process-wide registry that own reports true for (a
// component's: SchedulerOwns, ControllerManagerOwns), and the
// rest_client_* series of the component's own client, whose host label is
// clientHost (RESTClientHost).
func ComponentMetricsHandler(own func(string) bool, clientHost string) http.Handler {
	return metricsHandler(func(family string) bool { return own(family) || strings.HasPrefix(family, restClientPrefix) },
		func(host string) bool { return host == clientHost }, nil)
}

// SchedulerOwns reports whether the metric family name is the scheduler's:
// the families of k8s.io/kubernetes/pkg/scheduler and its plugins.
func SchedulerOwns(family string) bool {
	return strings.HasPrefix(family, "scheduler_")
}

// ControllerManagerOwns reports whether the metric family name is the
// controller manager's: every family that is neither the API server's nor
// the scheduler's (work queues, the controllers' own families, leader
// election), so that each family is served by one endpoint.
func ControllerManagerOwns(family string) bool {
	return !APIServerOwns(family) && !SchedulerOwns(family)
}
