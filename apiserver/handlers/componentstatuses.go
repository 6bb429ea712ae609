package handlers

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// serveComputed serves get and list (label and field selectors, no
// paging) of a Computed resource: 405 for any other verb or a
// subresource, 404 for a name not in the list.
func (h *Request) serveComputed() error {
	if (h.Info.Verb != "get" && h.Info.Verb != "list") || h.Info.Subresource != "" {
		return h.Fail(apierrors.NewMethodNotSupported(h.Resource.GroupResource(), h.Info.Verb))
	}
	list, err := h.Resource.Computed(h.Ctx)
	if err != nil {
		return h.Fail(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return h.Fail(err)
	}
	if h.Info.Verb == "list" {
		_, pred, err := h.listOptions()
		if err != nil {
			return h.Fail(err)
		}
		var kept []runtime.Object
		for _, item := range items {
			if ok, err := pred.Matches(item); err == nil && ok {
				kept = append(kept, item)
			}
		}
		if err := meta.SetList(list, kept); err != nil {
			return h.Fail(err)
		}
		return h.respond(http.StatusOK, list) // not respondList: its cache keys items by resourceVersion
	}
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil && m.GetName() == h.Info.Name {
			return h.respond(http.StatusOK, item)
		}
	}
	return h.Fail(apierrors.NewNotFound(h.Resource.GroupResource(), h.Info.Name))
}
