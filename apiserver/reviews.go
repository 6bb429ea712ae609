package apiserver

import (
	"net/http"

	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	_ "k8s.io/kubernetes/pkg/apis/authentication/install"
	_ "k8s.io/kubernetes/pkg/apis/authorization/install"
	"k8s.io/kubernetes/pkg/registry/authentication/selfsubjectreview"
	"k8s.io/kubernetes/pkg/registry/authentication/tokenreview"
	"k8s.io/kubernetes/pkg/registry/authorization/localsubjectaccessreview"
	"k8s.io/kubernetes/pkg/registry/authorization/selfsubjectaccessreview"
	"k8s.io/kubernetes/pkg/registry/authorization/selfsubjectrulesreview"
	"k8s.io/kubernetes/pkg/registry/authorization/subjectaccessreview"
)

// reviewResources are the virtual, create-only resources that ask the
// server's authenticator and authorizer a question and answer it in the
// object's status, never storing it: authorization.k8s.io/v1's access
// reviews (`kubectl auth can-i`, --list) and authentication.k8s.io/v1's
// SelfSubjectReview (`kubectl auth whoami`) and TokenReview. Kubernetes'
// own REST handlers answer them (validation included), over internal
// types.
func reviewResources() []*Resource {
	authz, authn := authorizationv1.SchemeGroupVersion, authenticationv1.SchemeGroupVersion
	review := func(gvk schema.GroupVersionKind, plural string, namespaced bool, newObj func() runtime.Object, creater func(s *Server) rest.Creater) *Resource {
		return &Resource{
			GVK: gvk, Plural: plural, Singular: plural[:len(plural)-1], Namespaced: namespaced, New: newObj,
			CreateOnly: func(h *handler) error { return h.createReview(creater(h.s)) },
		}
	}
	return []*Resource{
		review(authz.WithKind("SubjectAccessReview"), "subjectaccessreviews", false,
			func() runtime.Object { return &authorizationv1.SubjectAccessReview{} },
			func(s *Server) rest.Creater { return subjectaccessreview.NewREST(s.authz) }),
		review(authz.WithKind("LocalSubjectAccessReview"), "localsubjectaccessreviews", true,
			func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} },
			func(s *Server) rest.Creater { return localsubjectaccessreview.NewREST(s.authz) }),
		review(authz.WithKind("SelfSubjectAccessReview"), "selfsubjectaccessreviews", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
			func(s *Server) rest.Creater { return selfsubjectaccessreview.NewREST(s.authz) }),
		review(authz.WithKind("SelfSubjectRulesReview"), "selfsubjectrulesreviews", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
			func(s *Server) rest.Creater { return selfsubjectrulesreview.NewREST(s.authz.Rules) }),
		review(authn.WithKind("SelfSubjectReview"), "selfsubjectreviews", false,
			func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
			func(*Server) rest.Creater { return selfsubjectreview.NewREST() }),
		review(authn.WithKind("TokenReview"), "tokenreviews", false,
			func() runtime.Object { return &authenticationv1.TokenReview{} },
			func(s *Server) rest.Creater { return tokenreview.NewREST(s.tokenReviewer, s.apiAudiences()) }),
	}
}

// serveCreateOnly serves a virtual resource: create on its collection,
// 405 for any other verb or a subresource.
func (h *handler) serveCreateOnly() error {
	if h.info.Verb != "create" || h.info.Subresource != "" || h.info.Name != "" {
		return h.fail(apierrors.NewMethodNotSupported(h.r.GroupResource(), h.info.Verb))
	}
	return h.r.CreateOnly(h)
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
