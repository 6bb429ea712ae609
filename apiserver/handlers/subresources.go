package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
)

// subresource is a subresource served by its own handler (not status or
// scale, which every resource may have through its registry entry).
type Subresource struct {
	// Name is the subresource's path segment ("binding", "eviction").
	Name string
	// Kind is what its body is, in GroupVersion (the resource's own group
	// and version when empty, as discovery says).
	Kind         string
	GroupVersion schema.GroupVersion
	Verbs        metav1.Verbs
	// Methods, when set, are the HTTP methods served, checked in place
	// of Verbs (which discovery lists), as kube-apiserver's connect
	// methods: the proxies take OPTIONS too, which has no verb.
	Methods []string
	// Serve answers the request; h.info.Name is the parent object.
	Serve func(h *Request) error
}

// Subresources are the subresources served by their own handlers, by
// parent resource.
type Subresources map[schema.GroupResource][]Subresource

// Lookup finds r's subresource of that name.
func (t Subresources) Lookup(r *registry.Resource, name string) (Subresource, bool) {
	for _, sub := range t[r.GroupResource()] {
		if sub.Name == name {
			return sub, true
		}
	}
	return Subresource{}, false
}

// serveSubresource serves h's subresource if it is one of
// the API's Subresources (false otherwise); a verb (or method) the
// subresource does not have is 405.
func (h *Request) serveSubresource() (bool, error) {
	sub, ok := h.API.Subresources.Lookup(h.Resource, h.Info.Subresource)
	if !ok {
		return false, nil
	}
	allowed := sets.New(sub.Verbs...).Has(h.Info.Verb)
	if len(sub.Methods) > 0 {
		allowed = slices.Contains(sub.Methods, h.Echo.Request().Method)
	}
	if !allowed {
		return true, h.Fail(apierrors.NewMethodNotSupported(schema.GroupResource{Group: h.Resource.GVK.Group, Resource: h.Resource.Plural + "/" + sub.Name}, h.Info.Verb))
	}
	return true, sub.Serve(h)
}

// resourceVerbs are the verbs discovery lists for r: namespaces have no
// deletecollection in Kubernetes (each namespace is deleted on its own);
// virtual resources (CreateOnly) have only create.
func ResourceVerbs(r *registry.Resource) metav1.Verbs {
	if r.CreateOnly != nil {
		return metav1.Verbs{"create"}
	}
	if r.Computed != nil {
		return metav1.Verbs{"get", "list"}
	}
	if r.GVK.Group == "" && r.Plural == "namespaces" {
		return metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	return RESTVerbs
}

// AddDiscovery appends r's subresources to a discovery list, and the
// legacy core/v1 "bindings" resource after pods.
func (t Subresources) AddDiscovery(list *metav1.APIResourceList, r *registry.Resource) {
	for _, sub := range t[r.GroupResource()] {
		res := metav1.APIResource{Name: r.Plural + "/" + sub.Name, Namespaced: r.Namespaced, Kind: sub.Kind, Verbs: sub.Verbs}
		if !sub.GroupVersion.Empty() {
			res.Group, res.Version = sub.GroupVersion.Group, sub.GroupVersion.Version
		}
		list.APIResources = append(list.APIResources, res)
	}
	if r.GVK.Group == "" && r.Plural == "pods" {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: "bindings", SingularName: "binding", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}})
	}
}

// decodeAs reads the request body as one of kinds (the first when the body
// names none): 415 for an unknown media type, 400 for anything else.
func (h *Request) DecodeAs(kinds ...schema.GroupVersionKind) (runtime.Object, error) {
	body, err := h.ReadBody()
	if err != nil {
		return nil, err
	}
	mediaType := h.Echo.Request().Header.Get(echo.HeaderContentType)
	if mediaType == "" {
		mediaType = runtime.ContentTypeJSON
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), strings.TrimSpace(strings.Split(mediaType, ";")[0]))
	if !ok {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s", strings.Join(supportedMediaTypes(), ", ")),
		}}
	}
	obj, gvk, err := info.Serializer.Decode(body, &kinds[0], nil)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded: %v", err))
	}
	for _, k := range kinds {
		if *gvk == k {
			return obj, nil
		}
	}
	return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request is a %s, not a %s", gvk, kinds[0].Kind))
}

// restVerbs are the verbs every served resource supports.
var RESTVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
