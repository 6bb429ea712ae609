package handlers

import (
	"fmt"
	"net/http"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// Namespace lifecycle, as Kubernetes' namespace registry and its
// NamespaceLifecycle admission plugin:
//   - DELETE of a namespace whose spec.finalizers are not empty (the
//     "kubernetes" finalizer every namespace gets) only sets
//     deletionTimestamp and status.phase=Terminating; the namespace
//     controller empties it and removes the finalizer through
//     namespaces/NAME/finalize, after which it is gone;
//   - spec.finalizers change only through namespaces/NAME/finalize;
//   - nothing new may be created in a terminating namespace (403) and
//     the system namespaces may not be deleted (403): the
//     NamespaceLifecycle admission plugin (admission.go).

var namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// isNamespaces reports whether r is core/v1 namespaces.
func isNamespaces(r *registry.Resource) bool { return r.GVK.Group == "" && r.Plural == "namespaces" }

// pendingSpecFinalizers reports whether obj is a namespace whose
// spec.finalizers still hold it.
func pendingSpecFinalizers(obj runtime.Object) bool {
	ns, ok := obj.(*corev1.Namespace)
	return ok && len(ns.Spec.Finalizers) > 0
}

// markTerminating sets a namespace being deleted to phase Terminating.
func markTerminating(obj runtime.Object) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		ns.Status.Phase = corev1.NamespaceTerminating
	}
}

// keepNamespaceFinalizers keeps a namespace's spec.finalizers over an
// update of the main resource (only finalize changes them).
func keepNamespaceFinalizers(existing, updated runtime.Object) {
	old, ok := existing.(*corev1.Namespace)
	if !ok {
		return
	}
	updated.(*corev1.Namespace).Spec.Finalizers = old.Spec.Finalizers
}

// finalizeNamespace serves PUT namespaces/NAME/finalize: the namespace's
// spec.finalizers become the body's, nothing else changes (a stale
// resourceVersion is a 409). A namespace being deleted that is left with
// no finalizers at all is removed.
func (h *Request) FinalizeNamespace() error {
	var opts metav1.UpdateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	if errs := metav1validation.ValidateUpdateOptions(&opts); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "UpdateOptions"}, "", errs))
	}
	h.admitting(&opts, opts.DryRun)
	obj, err := h.decodeBody()
	if err != nil {
		return h.Fail(err)
	}
	want := obj.(*corev1.Namespace)
	if want.Name != h.Info.Name {
		return h.Fail(apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", want.Name, h.Info.Name)))
	}
	var errs field.ErrorList
	fs := make([]string, len(want.Spec.Finalizers))
	for i, f := range want.Spec.Finalizers {
		fs[i] = string(f)
	}
	errs = append(errs, apimachineryvalidation.ValidateFinalizers(fs, field.NewPath("spec", "finalizers"))...)
	if len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(h.Resource.GVK.GroupKind(), want.Name, errs))
	}
	tryUpdate := func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		cur := existing.(*corev1.Namespace)
		if rv := want.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
			return nil, nil, apierrors.NewConflict(h.Resource.GroupResource(), h.Info.Name,
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		// Admission sees an update of namespaces/finalize: the body
		// (mutated), then the namespace with only its finalizers changed.
		mutated, err := h.AdmitMutate(admission.Update, want.DeepCopy(), cur)
		if err != nil {
			return nil, nil, err
		}
		updated := cur.DeepCopy()
		updated.Spec.Finalizers = mutated.(*corev1.Namespace).Spec.Finalizers
		if err := h.AdmitValidate(admission.Update, updated, cur); err != nil {
			return nil, nil, err
		}
		return updated, nil, nil
	}
	if IsDryRun(opts.DryRun) {
		existing := &corev1.Namespace{}
		if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, existing); err != nil {
			return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		out, _, err := tryUpdate(existing, k8sstorage.ResponseMeta{})
		if err != nil {
			return h.Fail(err)
		}
		return h.respond(http.StatusOK, out)
	}
	out := &corev1.Namespace{}
	if err := h.Store.GuaranteedUpdate(h.Ctx, h.Key(), out, false, nil, tryUpdate, nil); err != nil {
		return h.Fail(storeerr.InterpretUpdateError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	res, err := h.finishDeletion(out)
	if err != nil {
		return h.Fail(err)
	}
	return h.respond(http.StatusOK, res)
}
