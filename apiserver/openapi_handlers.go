package apiserver

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sqlkube/sqlkube/apiserver/openapi"
)

// newOpenAPI builds the OpenAPI documents of the served resources.
func (s *Server) newOpenAPI() (*openapi.Builder, error) {
	var resources []openapi.Resource
	for _, r := range s.registry.Resources() {
		res := openapi.Resource{
			GVK: r.GVK, ListKind: r.GVK.Kind + "List", Plural: r.Plural, Namespaced: r.Namespaced,
			Verbs: restVerbs, Object: r.New(), List: r.NewList(),
		}
		if r.Scale {
			res.Subresources = append(res.Subresources, openapi.Subresource{
				Name: "scale", Verbs: []string{"get", "update", "patch"},
				GVK: autoscalingv1.SchemeGroupVersion.WithKind("Scale"), Object: &autoscalingv1.Scale{},
			})
		}
		if r.Status {
			res.Subresources = append(res.Subresources, openapi.Subresource{Name: "status", Verbs: []string{"get", "update", "patch"}})
		}
		resources = append(resources, res)
	}
	return openapi.NewBuilder(resources, openapi.Info{Title: "Kubernetes", Version: s.cfg.Version})
}

func (s *Server) openAPIV2(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.openapi.V2JSON())
}

func (s *Server) openAPIV3Index(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.openapi.V3Index())
}

// openAPIV3Doc serves one group-version's document; clients fetch it by
// the hash in the index and may cache it for good, as kube-apiserver
// allows.
func (s *Server) openAPIV3Doc(c echo.Context) error {
	path := strings.TrimPrefix(c.Request().URL.Path, "/openapi/v3/")
	doc, hash, ok := s.openapi.V3Doc(path)
	if !ok {
		return writeStatus(c, apierrors.NewNotFound(schema.GroupResource{}, c.Request().URL.Path))
	}
	if c.QueryParam("hash") == hash {
		c.Response().Header().Set("Cache-Control", "public, immutable, max-age=31536000")
	}
	c.Response().Header().Set("Etag", `"`+hash+`"`)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
}
