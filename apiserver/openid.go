package apiserver

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

// ServeOpenIDMetadata publishes the service-account issuer's OpenID
// discovery document and key set, at /.well-known/openid-configuration
// and /openid/v1/jwks, as kube-apiserver does: the document names
// https://externalAddress/openid/v1/jwks (externalAddress is host:port,
// the address pods and others reach this server at). Kubernetes' bootstrap
// policy lets every service account read both
// (system:service-account-issuer-discovery). Until it is called, and when
// the issuer is not an https URL (OIDC requires one), both are 404.
func (s *Server) ServeOpenIDMetadata(externalAddress string) error {
	sa := s.api.ServiceAccounts
	if sa == nil {
		return nil
	}
	md, err := serviceaccount.NewOpenIDMetadataProvider(sa.Issuer, "", externalAddress, sa.Keys)
	if err != nil {
		return fmt.Errorf("apiserver: service-account issuer discovery: %w", err)
	}
	s.openID.Store(&md)
	return nil
}

// openIDConfig and openIDKeys serve what ServeOpenIDMetadata published,
// with the Cache-Control kube-apiserver sends.
func (s *Server) openIDConfig(c echo.Context) error {
	return s.serveOpenID(c, echo.MIMEApplicationJSON, serviceaccount.OpenIDMetadataProvider.GetConfigJSON)
}

func (s *Server) openIDKeys(c echo.Context) error {
	return s.serveOpenID(c, "application/jwk-set+json", serviceaccount.OpenIDMetadataProvider.GetKeysetJSON)
}

func (s *Server) serveOpenID(c echo.Context, contentType string, get func(serviceaccount.OpenIDMetadataProvider) ([]byte, int)) error {
	md := s.openID.Load()
	if md == nil {
		return responses.Status(c, apierrors.NewNotFound(schema.GroupResource{}, c.Request().URL.Path))
	}
	body, maxAge := get(*md)
	c.Response().Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", maxAge))
	return c.Blob(http.StatusOK, contentType, body)
}
