package apiserver

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/loopback"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	requestunion "k8s.io/apiserver/pkg/authentication/request/union"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// publicPaths may be read without credentials, as on kubeadm clusters.
var publicPaths = map[string]bool{
	"/healthz": true, "/livez": true, "/readyz": true, "/version": true,
	// Where joining nodes find the cluster (kubeadm's discovery): RBAC lets
	// system:anonymous get only this ConfigMap.
	"/api/v1/namespaces/kube-public/configmaps/cluster-info": true,
}

// unsecuredUser is who unauthenticated requests act as when the server
// runs without authentication (tests, or behind a proxy that
// authenticates): a member of system:masters.
var unsecuredUser = &user.DefaultInfo{Name: "system:unsecured", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

// anonymousUser is who reads publicPaths without credentials.
var anonymousUser = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

// clientCertificate authenticates a request by its verified client
// certificate: user = CN, groups = O (the TLS layer verified it against
// the client CA).
var clientCertificate = authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return nil, false, nil
	}
	leaf := req.TLS.VerifiedChains[0][0]
	if leaf.Subject.CommonName == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name: leaf.Subject.CommonName, Groups: append([]string{}, leaf.Subject.Organization...),
	}}, true, nil
})

// newAuthenticator joins the configured ways in: client certificates,
// then bearer tokens (static, service account, bootstrap); any that
// succeeds wins and the user joins system:authenticated.
func newAuthenticator(tokens ...authenticator.Token) authenticator.Request {
	ways := []authenticator.Request{clientCertificate}
	var present []authenticator.Token
	for _, t := range tokens {
		if t != nil {
			present = append(present, t)
		}
	}
	if len(present) > 0 {
		ways = append(ways, bearertoken.New(tokenunion.New(present...)))
	}
	return group.NewAuthenticatedGroupAdder(requestunion.New(ways...))
}

// newTokenReviewer authenticates the tokens of TokenReviews with the
// server's token authenticators (not client certificates); nil without
// any.
func newTokenReviewer(tokens ...authenticator.Token) authenticator.Request {
	var present []authenticator.Token
	for _, t := range tokens {
		if t != nil {
			present = append(present, t)
		}
	}
	if len(present) == 0 {
		return nil
	}
	return group.NewAuthenticatedGroupAdder(bearertoken.New(tokenunion.New(present...)))
}

// apiAudiences are the audiences the API accepts tokens for: the
// service-account issuer, as kube-apiserver defaults --api-audiences.
func (s *Server) apiAudiences() authenticator.Audiences {
	if s.cfg.ServiceAccountIssuer != "" {
		return authenticator.Audiences{s.cfg.ServiceAccountIssuer}
	}
	return authenticator.Audiences{DefaultServiceAccountIssuer}
}

// authenticate identifies the caller: the loopback connection is the
// server itself; otherwise the authenticator decides. Without
// credentials only publicPaths are served (401 otherwise), unless the
// server runs without authentication.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		var u user.Info
		switch resp, ok, err := s.authn.AuthenticateRequest(req); {
		case loopback.IsLoopback(req.Context()):
			u = loopback.User
		case ok:
			u = resp.User
			// Credentials go no further than here.
			req.Header.Del("Authorization")
		case err != nil && s.cfg.Authenticate:
			return responses.Status(c, apierrors.NewUnauthorized("Unauthorized"))
		case !s.cfg.Authenticate:
			u = unsecuredUser
		case publicPaths[req.URL.Path]:
			u = anonymousUser
		default:
			return responses.Status(c, apierrors.NewUnauthorized("Unauthorized"))
		}
		c.SetRequest(req.WithContext(request.WithUser(req.Context(), u)))
		return next(c)
	}
}
