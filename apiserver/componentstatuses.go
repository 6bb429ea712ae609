package apiserver

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// componentStatuses reports whether the storage answers a read.
func (s *Server) componentStatuses(ctx context.Context) *corev1.ComponentStatusList {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cond := corev1.ComponentCondition{Type: corev1.ComponentHealthy, Status: corev1.ConditionTrue, Message: "ok"}
	if _, err := s.cfg.Client.Client.Get(ctx, "/registry/health"); err != nil {
		cond = corev1.ComponentCondition{Type: corev1.ComponentHealthy, Status: corev1.ConditionFalse, Error: err.Error()}
	}
	return &corev1.ComponentStatusList{Items: []corev1.ComponentStatus{{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-0"}, Conditions: []corev1.ComponentCondition{cond},
	}}}
}

// serveComputed serves get and list (label and field selectors, no
// paging) of a Computed resource: 405 for any other verb or a
// subresource, 404 for a name not in the list.
func (h *handler) serveComputed() error {
	if (h.info.Verb != "get" && h.info.Verb != "list") || h.info.Subresource != "" {
		return h.fail(apierrors.NewMethodNotSupported(h.r.GroupResource(), h.info.Verb))
	}
	list, err := h.r.Computed(h.ctx)
	if err != nil {
		return h.fail(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return h.fail(err)
	}
	if h.info.Verb == "list" {
		_, pred, err := h.listOptions()
		if err != nil {
			return h.fail(err)
		}
		var kept []runtime.Object
		for _, item := range items {
			if ok, err := pred.Matches(item); err == nil && ok {
				kept = append(kept, item)
			}
		}
		if err := meta.SetList(list, kept); err != nil {
			return h.fail(err)
		}
		return h.respond(http.StatusOK, list) // not respondList: its cache keys items by resourceVersion
	}
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil && m.GetName() == h.info.Name {
			return h.respond(http.StatusOK, item)
		}
	}
	return h.fail(apierrors.NewNotFound(h.r.GroupResource(), h.info.Name))
}
