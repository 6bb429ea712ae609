package handlers

import (
	"github.com/sqlkube/sqlkube/apiserver/registry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
)

// runUpdateStrategy runs the resource's update strategy (or that of its
// status or approval subresource) and answers 422 with its field errors.
func (h *Request) runUpdateStrategy(subresource string, existing, updated runtime.Object) (runtime.Object, error) {
	res, err := registry.StrategyUpdate(h.Ctx, h.Resource, subresource, existing, updated)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(res.Errs) > 0 {
		m, _ := meta.Accessor(updated)
		return nil, apierrors.NewInvalid(h.Resource.GVK.GroupKind(), m.GetName(), res.Errs)
	}
	h.warnAll(res.Warnings)
	// Updates, patches and applies of the object or its status by a node.
	if err := h.AdmitNodeWrite(admission.Update, res.Obj, existing, h.Info.Name); err != nil {
		return nil, err
	}
	return res.Obj, nil
}

// warnAll sends each of a strategy's warnings.
func (h *Request) warnAll(msgs []string) {
	for _, m := range msgs {
		h.warn(m)
	}
}
