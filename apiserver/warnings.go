package apiserver

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// warn adds Warning response headers (RFC 7234 code 299, as kube-apiserver
// sends them and kubectl prints them).
func (h *handler) warn(msgs ...string) {
	for _, msg := range msgs {
		h.c.Response().Header().Add("Warning", fmt.Sprintf("299 - %q", msg))
	}
}

// runUpdateStrategy runs the resource's update strategy (or its status
// strategy) and answers 422 with its field errors.
func (h *handler) runUpdateStrategy(status bool, existing, updated runtime.Object) (runtime.Object, error) {
	res, err := strategyUpdate(h.ctx, h.r, status, existing, updated)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(res.errs) > 0 {
		m, _ := meta.Accessor(updated)
		return nil, apierrors.NewInvalid(h.r.GVK.GroupKind(), m.GetName(), res.errs)
	}
	h.warn(res.warnings...)
	return res.obj, nil
}
