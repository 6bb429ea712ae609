package filters

import (
	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/loopback"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// PublicPaths may be read without credentials, as on kubeadm clusters.
var PublicPaths = map[string]bool{
	"/healthz": true, "/livez": true, "/readyz": true, "/version": true,
	// Where joining nodes find the cluster (kubeadm's discovery): RBAC lets
	// system:anonymous get only this ConfigMap.
	"/api/v1/namespaces/kube-public/configmaps/cluster-info": true,
}

// unsecuredUser is who unauthenticated requests act as when the server
// runs without authentication (tests, or behind a proxy that
// authenticates): a member of system:masters.
var unsecuredUser = &user.DefaultInfo{Name: "system:unsecured", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

// anonymousUser is who requests without credentials act as: on every
// path when anonymous requests are allowed, as kube-apiserver's default
// --anonymous-auth=true (authorization then decides: RBAC's bootstrap
// policy lets system:unauthenticated read only the health and version
// paths, so /metrics gets 403), else on PublicPaths only.
var anonymousUser = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

// Authentication identifies the caller: the loopback connection is the
// server itself (the authenticator is not asked); otherwise the
// authenticator decides. Bad credentials get 401. A request without
// credentials acts as system:anonymous when anonymous is true, as
// kube-apiserver's does, and authorization decides what it may do;
// when anonymous is false, only PublicPaths are served (401 otherwise).
// Unless authentication is required, it acts as unsecuredUser.
func Authentication(authn authenticator.Request, required, anonymous bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if loopback.IsLoopback(req.Context()) {
				c.SetRequest(req.WithContext(request.WithUser(req.Context(), loopback.User)))
				return next(c)
			}
			var u user.Info
			switch resp, ok, err := authn.AuthenticateRequest(req); {
			case ok:
				u = resp.User
				// Credentials go no further than here.
				req.Header.Del("Authorization")
			case err != nil && required:
				return responses.Status(c, apierrors.NewUnauthorized("Unauthorized"))
			case !required:
				u = unsecuredUser
			case anonymous || PublicPaths[req.URL.Path]:
				u = anonymousUser
			default:
				return responses.Status(c, apierrors.NewUnauthorized("Unauthorized"))
			}
			c.SetRequest(req.WithContext(request.WithUser(req.Context(), u)))
			return next(c)
		}
	}
}
