package apiserver

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/openapi"
	"github.com/sqlkube/sqlkube/apiserver/responses"
)

// newOpenAPI builds the OpenAPI documents of the served resources.
func (s *Server) newOpenAPI() (*openapi.Builder, error) {
	var resources []openapi.Resource
	for _, r := range s.api.Registry.Resources() {
		res := openapi.Resource{
			GVK: r.GVK, ListKind: r.GVK.Kind + "List", Plural: r.Plural, Namespaced: r.Namespaced,
			Verbs: handlers.RESTVerbs, Object: r.New(),
		}
		if r.CreateOnly != nil {
			res.Verbs = []string{"create"}
		} else {
			if r.Computed != nil {
				res.Verbs = []string{"get", "list"}
			}
			res.List = r.NewList()
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
		if r.Approval {
			res.Subresources = append(res.Subresources, openapi.Subresource{Name: "approval", Verbs: []string{"get", "update", "patch"}})
		}
		for _, sub := range r.ObjectSubresources {
			res.Subresources = append(res.Subresources, openapi.Subresource{Name: sub, Verbs: []string{"get", "update", "patch"}})
		}
		resources = append(resources, res)
	}
	// Shared: every API server of the process serving the same resources
	// (a host's tenants) uses one set of documents.
	return openapi.Shared(resources, openapi.Info{Title: "Kubernetes", Version: s.cfg.Version})
}

// protobufV2 is the media type older kubectls (1.27 and before) ask
// /openapi/v2 for.
const protobufV2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"

func (s *Server) openAPIV2(c echo.Context) error {
	docs, err := s.openAPIDocs()
	if err != nil {
		return responses.Status(c, apierrors.NewInternalError(err))
	}
	if strings.Contains(c.Request().Header.Get(echo.HeaderAccept), protobufV2) {
		body, err := docs.v2ProtoBytes()
		if err != nil {
			return responses.Status(c, apierrors.NewInternalError(err))
		}
		// The Content-Type must parse as a media type, which the Accept
		// value's "@" does not; kube-apiserver answers with this one.
		return c.Blob(http.StatusOK, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", body)
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, docs.v2)
}

func (s *Server) openAPIV3Index(c echo.Context) error {
	docs, err := s.openAPIDocs()
	if err != nil {
		return responses.Status(c, apierrors.NewInternalError(err))
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.aggregator.Load().WithV3Paths(docs.v3Index))
}

// openAPIV3Doc serves one group-version's document; clients fetch it by
// the hash in the index and may cache it for good, as kube-apiserver
// allows.
func (s *Server) openAPIV3Doc(c echo.Context) error {
	path := strings.TrimPrefix(c.Request().URL.Path, "/openapi/v3/")
	if a := s.aggregator.Load(); a != nil {
		if svc, ok := a.RemoteAPIService("/" + path); ok {
			return a.ServeOpenAPIV3(c, svc, path) // aggregator/openapi.go
		}
	}
	docs, err := s.openAPIDocs()
	if err != nil {
		return responses.Status(c, apierrors.NewInternalError(err))
	}
	doc, hash, ok := s.v3Doc(docs, path)
	if !ok {
		return responses.Status(c, apierrors.NewNotFound(schema.GroupResource{}, c.Request().URL.Path))
	}
	if c.QueryParam("hash") == hash {
		c.Response().Header().Set("Cache-Control", "public, immutable, max-age=31536000")
	}
	c.Response().Header().Set("Etag", `"`+hash+`"`)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
}
