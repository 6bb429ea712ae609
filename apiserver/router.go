package apiserver

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/subresources"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// serveResource routes /api/... and /apis/... requests: discovery
// documents, then the REST verbs on a resource.
func (s *Server) serveResource(c echo.Context) error {
	info, err := filters.RequestInfoOf(c.Request())
	if err != nil {
		return responses.Status(c, apierrors.NewBadRequest(err.Error()))
	}
	if a := s.aggregator.Load(); a != nil {
		if svc, ok := a.RemoteAPIService(c.Request().URL.Path); ok {
			return a.Serve(c, svc) // aggregator/aggregator.go
		}
	}
	if !info.IsResourceRequest {
		return s.discovery.ServeGroupVersion(c)
	}
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	if subresources.IsLegacyBindings(gvr) && info.Name == "" && info.Subresource == "" {
		gvr.Resource, info.Resource, info.Subresource = "pods", "pods", "binding" // served as pods/NAME/binding
	}
	r, ok := s.api.Registry.Lookup(gvr)
	if ok && info.Subresource != "" {
		_, ok = s.api.Subresources.Lookup(r, info.Subresource)
		ok = ok || r.ObjectSubresource(info.Subresource) || (info.Subresource == "scale" && r.Scale)
	}
	if !ok {
		return responses.Status(c, apierrors.NewNotFound(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Name))
	}
	if info.Name != "" {
		if msgs := path.IsValidPathSegmentName(info.Name); len(msgs) > 0 {
			return responses.Status(c, apierrors.NewBadRequest(fmt.Sprintf("invalid name %q: %s", info.Name, strings.Join(msgs, ", "))))
		}
	}
	// A list or watch may name one object by field selector (metadata.name)
	// across namespaces.
	if r.Namespaced && info.Namespace == "" && info.Name != "" && info.Verb != "list" && info.Verb != "watch" {
		return responses.Status(c, apierrors.NewBadRequest("a namespace is required for "+r.Plural))
	}
	return s.api.Serve(c, r, info)
}
