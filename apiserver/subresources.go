package apiserver

import (
	"fmt"
	"net/http"
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
type subresource struct {
	// Name is the subresource's path segment ("binding", "eviction").
	Name string
	// Kind is what its body is, in GroupVersion (the resource's own group
	// and version when empty, as discovery says).
	Kind         string
	GroupVersion schema.GroupVersion
	Verbs        metav1.Verbs
	// Serve answers the request; h.info.Name is the parent object.
	Serve func(h *handler) error
}

// extraSubresources are the subresources served by their own handlers, by
// parent resource (core group).
var extraSubresources = map[schema.GroupResource][]subresource{
	{Resource: "pods"}: {
		{Name: "binding", Kind: "Binding", Verbs: metav1.Verbs{"create"}, Serve: (*handler).bind},
		{Name: "eviction", Kind: "Eviction", GroupVersion: schema.GroupVersion{Group: "policy", Version: "v1"}, Verbs: metav1.Verbs{"create"}, Serve: (*handler).evict},
		// kubeletproxy.go: served by the pod's kubelet.
		{Name: "attach", Kind: "PodAttachOptions", Verbs: metav1.Verbs{"create", "get"}, Serve: (*handler).podAttach},
		{Name: "exec", Kind: "PodExecOptions", Verbs: metav1.Verbs{"create", "get"}, Serve: (*handler).podExec},
		{Name: "log", Kind: "Pod", Verbs: metav1.Verbs{"get"}, Serve: (*handler).podLog},
		{Name: "portforward", Kind: "PodPortForwardOptions", Verbs: metav1.Verbs{"create", "get"}, Serve: (*handler).podPortForward},
	},
	{Resource: "nodes"}: {
		{Name: "proxy", Kind: "NodeProxyOptions", Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}, Serve: (*handler).nodeProxy},
	},
	{Resource: "serviceaccounts"}: {
		{Name: "token", Kind: "TokenRequest", GroupVersion: schema.GroupVersion{Group: "authentication.k8s.io", Version: "v1"}, Verbs: metav1.Verbs{"create"}, Serve: (*handler).createToken},
	},
	{Resource: "namespaces"}: {
		{Name: "finalize", Kind: "Namespace", Verbs: metav1.Verbs{"update"}, Serve: (*handler).finalizeNamespace},
	},
}

// lookupSubresource finds r's subresource of that name.
func lookupSubresource(r *registry.Resource, name string) (subresource, bool) {
	for _, sub := range extraSubresources[r.GroupResource()] {
		if sub.Name == name {
			return sub, true
		}
	}
	return subresource{}, false
}

// serveSubresource serves h's subresource if it is one of
// extraSubresources (false otherwise); a verb the subresource does not
// have is 405.
func (h *handler) serveSubresource() (bool, error) {
	sub, ok := lookupSubresource(h.r, h.info.Subresource)
	if !ok {
		return false, nil
	}
	if !sets.New(sub.Verbs...).Has(h.info.Verb) {
		return true, h.fail(apierrors.NewMethodNotSupported(schema.GroupResource{Group: h.r.GVK.Group, Resource: h.r.Plural + "/" + sub.Name}, h.info.Verb))
	}
	return true, sub.Serve(h)
}

// resourceVerbs are the verbs discovery lists for r: namespaces have no
// deletecollection in Kubernetes (each namespace is deleted on its own);
// virtual resources (CreateOnly) have only create.
func resourceVerbs(r *registry.Resource) metav1.Verbs {
	if r.CreateOnly != nil {
		return metav1.Verbs{"create"}
	}
	if r.Computed != nil {
		return metav1.Verbs{"get", "list"}
	}
	if r.GVK.Group == "" && r.Plural == "namespaces" {
		return metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	return restVerbs
}

// addSubresourceDiscovery appends r's extraSubresources to a discovery
// list, and the legacy core/v1 "bindings" resource after pods.
func addSubresourceDiscovery(list *metav1.APIResourceList, r *registry.Resource) {
	for _, sub := range extraSubresources[r.GroupResource()] {
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
func (h *handler) decodeAs(kinds ...schema.GroupVersionKind) (runtime.Object, error) {
	body, err := h.readBody()
	if err != nil {
		return nil, err
	}
	mediaType := h.c.Request().Header.Get(echo.HeaderContentType)
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
