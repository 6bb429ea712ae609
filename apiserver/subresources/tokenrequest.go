package subresources

import (
	"fmt"
	"net/http"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

var tokenRequestGVK = authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")

// Token lifetimes, as kube-apiserver bounds them.
const (
	defaultTokenSeconds = 3600
	minTokenSeconds     = 600
	maxTokenSeconds     = 1 << 32
)

// createToken serves POST serviceaccounts/NAME/token (the TokenRequest
// API, `kubectl create token`): a JWT for the service account signed by
// the cluster key, for the requested audiences (the issuer by default) and
// lifetime (an hour by default, at least ten minutes), optionally bound to
// a pod, secret or node so that it dies with that object.
func createToken(h *handlers.Request) error {
	sas := h.API.ServiceAccounts
	if sas == nil {
		return h.Fail(apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts/token"}, h.Info.Name))
	}
	var opts metav1.CreateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	obj, err := h.DecodeAs(tokenRequestGVK)
	if err != nil {
		return h.Fail(err)
	}
	// Admission sees a create of serviceaccounts/token, kind TokenRequest,
	// defaulted (an hour) as decoding defaults it upstream.
	scheme.Default(obj)
	h.AdmittingAs(tokenRequestGVK, &opts, opts.DryRun)
	if obj, err = h.AdmitMutate(admission.Create, obj, nil); err != nil {
		return h.Fail(err)
	}
	req := obj.(*authenticationv1.TokenRequest)
	// A node asks only for tokens bound to its own pods, for audiences its
	// pods name. NodeRestriction is a mutating plugin upstream, so it sees
	// the request before the audiences are defaulted: no audience means
	// the API server's own, which a pod's kube-api-access volume names.
	if err := h.AdmitNodeWrite(admission.Create, req, nil, h.Info.Name); err != nil {
		return h.Fail(err)
	}
	if req.Spec.ExpirationSeconds == nil {
		secs := int64(defaultTokenSeconds)
		req.Spec.ExpirationSeconds = &secs
	}
	if len(req.Spec.Audiences) == 0 {
		req.Spec.Audiences = []string{sas.Issuer}
	}
	if errs := validateTokenRequest(req); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(tokenRequestGVK.GroupKind(), h.Info.Name, errs))
	}
	if err := h.AdmitValidate(admission.Create, req, nil); err != nil {
		return h.Fail(err)
	}
	sa := &corev1.ServiceAccount{}
	if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, sa); err != nil {
		return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	pod, secret, node, err := boundObjects(h, req.Spec.BoundObjectRef)
	if err != nil {
		return h.Fail(err)
	}
	in := func(o runtime.Object) runtime.Object {
		if o == nil {
			return nil
		}
		out, err := scheme.ToInternal(o)
		if err != nil {
			return nil
		}
		return out
	}
	var ipod *api.Pod
	var isecret *api.Secret
	var inode *api.Node
	if p, ok := in(pod).(*api.Pod); ok {
		ipod = p
	}
	if s, ok := in(secret).(*api.Secret); ok {
		isecret = s
	}
	if n, ok := in(node).(*api.Node); ok {
		inode = n
	}
	isa, ok := in(sa).(*api.ServiceAccount)
	if !ok {
		return h.Fail(apierrors.NewInternalError(fmt.Errorf("service account %s/%s: conversion failed", sa.Namespace, sa.Name)))
	}
	claims, private, err := serviceaccount.Claims(*isa, ipod, isecret, inode, nil, nil, *req.Spec.ExpirationSeconds, 0, req.Spec.Audiences, nil)
	if err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	out := req.DeepCopy()
	out.Name, out.Namespace = sa.Name, sa.Namespace
	out.CreationTimestamp = metav1.Now()
	out.Status.ExpirationTimestamp = metav1.NewTime(claims.Expiry.Time())
	if !handlers.IsDryRun(opts.DryRun) {
		if out.Status.Token, err = sas.Generator.GenerateToken(h.Ctx, claims, private); err != nil {
			return h.Fail(apierrors.NewInternalError(err))
		}
	}
	return responses.Encode(h.Echo, http.StatusCreated, out, authenticationv1.SchemeGroupVersion, handlers.Negotiated(h))
}

func validateTokenRequest(req *authenticationv1.TokenRequest) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	switch secs := *req.Spec.ExpirationSeconds; {
	case secs < minTokenSeconds:
		errs = append(errs, field.Invalid(spec.Child("expirationSeconds"), secs, "may not specify a duration less than 10 minutes"))
	case secs > maxTokenSeconds:
		errs = append(errs, field.TooLong(spec.Child("expirationSeconds"), secs, maxTokenSeconds))
	}
	for i, a := range req.Spec.Audiences {
		if a == "" {
			errs = append(errs, field.Invalid(spec.Child("audiences").Index(i), a, "may not be empty"))
		}
	}
	if ref := req.Spec.BoundObjectRef; ref != nil {
		path := spec.Child("boundObjectRef")
		if ref.APIVersion != "" && ref.APIVersion != "v1" {
			errs = append(errs, field.NotSupported(path.Child("apiVersion"), ref.APIVersion, []string{"v1"}))
		}
		if ref.Kind != "Pod" && ref.Kind != "Secret" && ref.Kind != "Node" {
			errs = append(errs, field.NotSupported(path.Child("kind"), ref.Kind, []string{"Pod", "Secret", "Node"}))
		}
		if ref.Name == "" {
			errs = append(errs, field.Required(path.Child("name"), ""))
		}
	}
	return errs
}

// boundObjects reads the object a token is bound to (a pod also brings
// its node): 404 if it is missing, 409 if its uid is not the one named.
func boundObjects(h *handlers.Request, ref *authenticationv1.BoundObjectReference) (pod *corev1.Pod, secret *corev1.Secret, node *corev1.Node, err error) {
	if ref == nil {
		return nil, nil, nil, nil
	}
	get := func(resource, namespace, name string, into runtime.Object) error {
		r, ok := h.API.Registry.Lookup(schema.GroupVersionResource{Version: "v1", Resource: resource})
		if !ok {
			return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
		}
		if err := h.API.Storages[r].Get(h.Ctx, r.Key(namespace, name), k8sstorage.GetOptions{}, into); err != nil {
			return storeerr.InterpretGetError(err, r.GroupResource(), name)
		}
		return nil
	}
	checkUID := func(uid types.UID) error {
		if ref.UID != "" && ref.UID != uid {
			return apierrors.NewConflict(schema.GroupResource{Resource: "serviceaccounts/token"}, h.Info.Name,
				fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record: %s", ref.UID, uid))
		}
		return nil
	}
	switch ref.Kind {
	case "Pod":
		pod = &corev1.Pod{}
		if err := get("pods", h.Info.Namespace, ref.Name, pod); err != nil {
			return nil, nil, nil, err
		}
		if err := checkUID(pod.UID); err != nil {
			return nil, nil, nil, err
		}
		if pod.Spec.NodeName != "" {
			n := &corev1.Node{}
			if get("nodes", "", pod.Spec.NodeName, n) == nil {
				node = n
			}
		}
	case "Secret":
		secret = &corev1.Secret{}
		if err := get("secrets", h.Info.Namespace, ref.Name, secret); err != nil {
			return nil, nil, nil, err
		}
		if err := checkUID(secret.UID); err != nil {
			return nil, nil, nil, err
		}
	case "Node":
		node = &corev1.Node{}
		if err := get("nodes", "", ref.Name, node); err != nil {
			return nil, nil, nil, err
		}
		if err := checkUID(node.UID); err != nil {
			return nil, nil, nil, err
		}
	}
	return pod, secret, node, nil
}
