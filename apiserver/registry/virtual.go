package registry

// The virtual resources: nothing of them is stored.

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
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
func reviewResources(run Running) []*Resource {
	authz, authn := authorizationv1.SchemeGroupVersion, authenticationv1.SchemeGroupVersion
	review := func(gvk schema.GroupVersionKind, plural string, namespaced bool, newObj func() runtime.Object, creater func() rest.Creater) *Resource {
		return &Resource{
			GVK: gvk, Plural: plural, Singular: plural[:len(plural)-1], Namespaced: namespaced, New: newObj,
			CreateOnly: creater,
		}
	}
	return []*Resource{
		review(authz.WithKind("SubjectAccessReview"), "subjectaccessreviews", false,
			func() runtime.Object { return &authorizationv1.SubjectAccessReview{} },
			func() rest.Creater { return subjectaccessreview.NewREST(run.Authorizer(), legacyscheme.Scheme) }),
		review(authz.WithKind("LocalSubjectAccessReview"), "localsubjectaccessreviews", true,
			func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} },
			func() rest.Creater { return localsubjectaccessreview.NewREST(run.Authorizer(), legacyscheme.Scheme) }),
		review(authz.WithKind("SelfSubjectAccessReview"), "selfsubjectaccessreviews", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
			func() rest.Creater { return selfsubjectaccessreview.NewREST(run.Authorizer(), legacyscheme.Scheme) }),
		review(authz.WithKind("SelfSubjectRulesReview"), "selfsubjectrulesreviews", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
			func() rest.Creater { return selfsubjectrulesreview.NewREST(run.Authorizer().Rules) }),
		review(authn.WithKind("SelfSubjectReview"), "selfsubjectreviews", false,
			func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
			func() rest.Creater { return selfsubjectreview.NewREST() }),
		review(authn.WithKind("TokenReview"), "tokenreviews", false,
			func() runtime.Object { return &authenticationv1.TokenReview{} },
			func() rest.Creater { return tokenreview.NewREST(run.TokenReviewer(), run.APIAudiences()) }),
	}
}

// componentStatusesResource is core/v1's componentstatuses (deprecated
// upstream, still served): computed at each request, never stored.
// kube-apiserver probes the scheduler, the controller manager and each
// etcd server; sqlkube's controllers run in-process or elsewhere, so the
// list holds its storage only, as etcd-0.
func componentStatusesResource(run Running) *Resource {
	return &Resource{
		GVK: corev1.SchemeGroupVersion.WithKind("ComponentStatus"), Plural: "componentstatuses", Singular: "componentstatus",
		ShortNames: []string{"cs"},
		New:        func() runtime.Object { return &corev1.ComponentStatus{} }, NewList: func() runtime.Object { return &corev1.ComponentStatusList{} },
		Computed: func(ctx context.Context) (runtime.Object, error) { return run.ComponentStatuses(ctx), nil },
	}
}
