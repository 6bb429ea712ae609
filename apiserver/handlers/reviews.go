package handlers

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
func (h *Request) serveCreateOnly() error {
	if h.Info.Verb != "create" || h.Info.Subresource != "" || h.Info.Name != "" {
		return h.Fail(apierrors.NewMethodNotSupported(h.Resource.GroupResource(), h.Info.Verb))
	}
	return h.createReview(h.Resource.CreateOnly())
}

// createReview decodes a review (400 if it is not one), has Kubernetes'
// handler answer it on its internal version (400/422 for invalid ones)
// and writes the answer back, 201 Created as kube-apiserver does. A
// dry run answers too: nothing is stored either way.
func (h *Request) createReview(st rest.Creater) error {
	var opts metav1.CreateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	if errs := metav1validation.ValidateCreateOptions(&opts); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "CreateOptions"}, "", errs))
	}
	obj, err := h.DecodeAs(h.Resource.GVK)
	if err != nil {
		return h.Fail(err)
	}
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	answer, err := st.Create(h.Ctx, in, nil, &opts)
	if err != nil {
		return h.Fail(err)
	}
	out, err := scheme.FromInternal(answer, h.Resource.New)
	if err != nil {
		return h.Fail(apierrors.NewInternalError(err))
	}
	return responses.Encode(h.Echo, http.StatusCreated, out, h.Resource.GroupVersion(), Negotiated(h))
}
