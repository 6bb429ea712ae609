package apiserver

import (
	"net/http"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// publicPaths may be read without credentials, as on kubeadm clusters.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

// authenticate identifies the caller by its verified client certificate
// (user = CN, groups = O). Without one, only publicPaths are served (401
// otherwise) unless the server runs without authentication (tests, or
// behind a proxy that authenticates).
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.TLS != nil && len(req.TLS.VerifiedChains) > 0 && len(req.TLS.VerifiedChains[0]) > 0 {
			leaf := req.TLS.VerifiedChains[0][0]
			u := &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: append(append([]string{}, leaf.Subject.Organization...), user.AllAuthenticated)}
			c.SetRequest(req.WithContext(request.WithUser(req.Context(), u)))
			return next(c)
		}
		if !s.cfg.Authenticate || publicPaths[req.URL.Path] {
			return next(c)
		}
		return writeStatus(c, apierrors.NewUnauthorized("Unauthorized"))
	}
}

func (s *Server) readyz(c echo.Context) error {
	for _, ready := range s.ready {
		if !ready() {
			return c.String(http.StatusServiceUnavailable, "[-]watch caches not ready\nreadyz check failed")
		}
	}
	return c.String(http.StatusOK, "ok")
}
