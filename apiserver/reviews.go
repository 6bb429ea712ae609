package apiserver

import (
	"net/http"

	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
)

// serveCreateOnly serves a virtual resource: create on its collection,
// 405 for any other verb or a subresource.
func (h *handler) serveCreateOnly() error {
	if h.info.Verb != "create" || h.info.Subresource != "" || h.info.Name != "" {
		return h.fail(apierrors.NewMethodNotSupported(h.r.GroupResource(), h.info.Verb))
	}
	return h.createReview(h.r.CreateOnly())
}

// createReview decodes a review (400 if it is not one), has Kubernetes'
// handler answer it on its internal version (400/422 for invalid ones)
// and writes the answer back, 201 Created as kube-apiserver does. A
// dry run answers too: nothing is stored either way.
func (h *handler) createReview(st rest.Creater) error {
	var opts metav1.CreateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.c.Request().URL.Query(), metaGV, &opts); err != nil {
		return h.fail(apierrors.NewBadRequest(err.Error()))
	}
	if errs := metav1validation.ValidateCreateOptions(&opts); len(errs) > 0 {
		return h.fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "CreateOptions"}, "", errs))
	}
	obj, err := h.decodeAs(h.r.GVK)
	if err != nil {
		return h.fail(err)
	}
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return h.fail(apierrors.NewBadRequest(err.Error()))
	}
	answer, err := st.Create(h.ctx, in, nil, &opts)
	if err != nil {
		return h.fail(err)
	}
	out, err := scheme.FromInternal(answer, h.r.New)
	if err != nil {
		return h.fail(apierrors.NewInternalError(err))
	}
	return responses.Encode(h.c, http.StatusCreated, out, h.r.GroupVersion(), negotiated(h))
}
