package handlers

import (
	"context"
	"reflect"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// admissionRequest is what a write tells admission about itself: its
// options (CreateOptions, UpdateOptions, PatchOptions, DeleteOptions) and
// whether it is a dry run. The verbs set it once they have decoded their
// options.
type admissionRequest struct {
	options runtime.Object
	dryRun  bool
	// kind is the body's kind where it is not the resource's
	// (pods/binding, pods/eviction, serviceaccounts/token); empty: the
	// resource's.
	kind schema.GroupVersionKind
}

// admitting records a write's options for admission.
func (h *Request) admitting(options runtime.Object, dryRun []string) {
	h.adm = admissionRequest{options: options, dryRun: IsDryRun(dryRun)}
}

// admittingAs is admitting for a write to a subresource whose body is of
// another kind than the resource (a Binding to pods/binding, say).
func (h *Request) AdmittingAs(kind schema.GroupVersionKind, options runtime.Object, dryRun []string) {
	h.adm = admissionRequest{options: options, dryRun: IsDryRun(dryRun), kind: kind}
}

// admissionKind is the kind of the objects admission sees.
func (h *Request) admissionKind() schema.GroupVersionKind {
	if h.adm.kind.Empty() {
		return h.Resource.GVK
	}
	return h.adm.kind
}

// admissionOptions are a write's options as kube-apiserver hands them to
// admission (and webhooks see them in AdmissionReview): typed
// meta.k8s.io/v1, a patch's as the UpdateOptions (or, for an apply that
// creates, CreateOptions) it becomes.
func admissionOptions(op admission.Operation, options runtime.Object) runtime.Object {
	var out runtime.Object
	switch o := options.(type) {
	case *metav1.PatchOptions:
		if op == admission.Create {
			out = &metav1.CreateOptions{DryRun: o.DryRun, FieldManager: o.FieldManager, FieldValidation: o.FieldValidation}
		} else {
			out = &metav1.UpdateOptions{DryRun: o.DryRun, FieldManager: o.FieldManager, FieldValidation: o.FieldValidation}
		}
	case *metav1.CreateOptions:
		out = o.DeepCopy()
	case *metav1.UpdateOptions:
		out = o.DeepCopy()
	case *metav1.DeleteOptions:
		out = o.DeepCopy()
	default:
		return options
	}
	kind := reflect.TypeOf(out).Elem().Name()
	out.GetObjectKind().SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind(kind))
	return out
}

// admitMutate runs the mutating admission plugins on obj (the served
// version; old is nil on create and delete) and returns the object they
// made, in the served version. Without plugins obj is returned as is.
func (h *Request) AdmitMutate(op admission.Operation, obj, old runtime.Object) (runtime.Object, error) {
	mutator, ok := h.API.Admission.(admission.MutationInterface)
	if !ok || !mutator.Handles(op) {
		return obj, nil
	}
	in, converted := admissionVersion(obj)
	if err := mutator.Admit(h.admissionContext(), h.admissionAttributes(op, in, old), h.API.AdmissionObjects); err != nil {
		return nil, err
	}
	if !converted {
		return in, nil
	}
	kind := h.admissionKind()
	if kind == h.Resource.GVK {
		return scheme.FromInternal(in, h.Resource.New)
	}
	return scheme.FromInternal(in, func() runtime.Object {
		out, _ := legacyscheme.Scheme.New(kind) // a kind decoded from the body: the scheme knows it
		return out
	})
}

// AdmitConnect admits a connect request (a proxy, exec, attach,
// port-forward) as kube-apiserver's connect handler does before it
// connects: its options (served version, of kind) are the object, and
// the plugins that handle CONNECT (webhooks and policies whose rules name
// it) may refuse.
func (h *Request) AdmitConnect(kind schema.GroupVersionKind, opts runtime.Object) error {
	h.AdmittingAs(kind, nil, nil)
	if _, err := h.AdmitMutate(admission.Connect, opts, nil); err != nil {
		return err
	}
	return h.AdmitValidate(admission.Connect, opts, nil)
}

// admitValidate runs the validating admission plugins on obj (the object
// about to be stored, served version; nil for a delete).
func (h *Request) AdmitValidate(op admission.Operation, obj, old runtime.Object) error {
	validator, ok := h.API.Admission.(admission.ValidationInterface)
	if !ok || !validator.Handles(op) {
		return nil
	}
	in, _ := admissionVersion(obj)
	return validator.Validate(h.admissionContext(), h.admissionAttributes(op, in, old), h.API.AdmissionObjects)
}

// admissionAttributes describes the request to the plugins: the
// resource's served kind and version (the body's for pods/binding and
// the like), the object's name and namespace (the request's for a delete
// and a subresource), the user, the options and dry run.
func (h *Request) admissionAttributes(op admission.Operation, obj, old runtime.Object) admission.Attributes {
	oldIn, _ := admissionVersion(old)
	name, namespace := h.Info.Name, h.Info.Namespace
	if obj != nil && (h.Info.Subresource == "" || name == "") {
		if m, err := meta.Accessor(obj); err == nil {
			name = m.GetName()
			if h.Resource.Namespaced {
				namespace = m.GetNamespace()
			}
		}
	}
	switch {
	case isNamespaces(h.Resource):
		// A namespace's own namespace is its name (the URL's, none on
		// create), as kube-apiserver's request info has it: webhooks'
		// namespaceSelectors match it.
		namespace = h.Info.Name
	case !h.Resource.Namespaced:
		namespace = ""
	}
	u, _ := request.UserFrom(h.Ctx)
	return admission.NewAttributesRecord(obj, oldIn, h.admissionKind(), namespace, name,
		h.Resource.GroupVersion().WithResource(h.Resource.Plural), h.Info.Subresource, op, admissionOptions(op, h.adm.options), h.adm.dryRun, u)
}

// admissionContext is the request's context with its warnings going to
// the response's Warning headers (PodSecurity's warn level).
func (h *Request) admissionContext() context.Context {
	return warning.WithWarningRecorder(h.Ctx, handlerWarnings{h})
}

type handlerWarnings struct{ h *Request }

func (w handlerWarnings) AddWarning(_, text string) { w.h.warn(text) }

// admissionVersion is obj as the plugins expect it: built-in types in
// their internal version (converted reports that), custom resources and
// types without one as they are.
func admissionVersion(obj runtime.Object) (_ runtime.Object, converted bool) {
	if obj == nil {
		return nil, false
	}
	if _, ok := obj.(runtime.Unstructured); ok {
		return obj, false
	}
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return obj, false
	}
	return in, true
}

// prepareCreate admits and prepares a new object: mutating admission on
// the defaulted object, a service's addresses, then prepareNew (system
// fields, the type's strategy and validation), then validating
// admission. finish keeps (true) or gives back (false) the addresses.
func (h *Request) prepareCreate(obj runtime.Object) (runtime.Object, finishFunc, error) {
	scheme.Default(obj)
	obj, err := h.AdmitMutate(admission.Create, obj, nil)
	if err != nil {
		return nil, nil, err
	}
	finish, err := h.beginServiceCreate(obj)
	if err != nil {
		return nil, nil, err
	}
	if obj, err = h.prepareNew(obj); err != nil {
		finish(false)
		return nil, nil, err
	}
	if err := h.AdmitValidate(admission.Create, obj, nil); err != nil {
		finish(false)
		return nil, nil, err
	}
	return obj, finish, nil
}

// prepareUpdate admits and prepares an update of existing: mutating
// admission on the defaulted update, then prepareChanged, then validating
// admission. It may run more than once for one request (conflicts retry).
func (h *Request) prepareUpdate(existing, updated runtime.Object) (runtime.Object, *uint64, error) {
	scheme.Default(updated)
	updated, err := h.AdmitMutate(admission.Update, updated, existing)
	if err != nil {
		return nil, nil, err
	}
	out, ttl, err := h.prepareChanged(existing, updated)
	if err != nil {
		return nil, nil, err
	}
	if err := h.AdmitValidate(admission.Update, out, existing); err != nil {
		return nil, nil, err
	}
	return out, ttl, nil
}

// admitDelete runs mutating admission on a delete (or, with no name, a
// deletecollection) with opts: NamespaceLifecycle refuses to delete the
// system namespaces (403). The plugins see no object, as kube-apiserver's
// mutating ones do; validating admission runs on each object deleted
// (validateDelete).
func (h *Request) admitDelete(opts *metav1.DeleteOptions) error {
	h.admitting(opts, opts.DryRun)
	_, err := h.AdmitMutate(admission.Delete, nil, nil)
	return err
}

// validateDelete runs validating admission on the deletion of existing
// (the stored object: webhooks and policies see it as oldObject), as
// kube-apiserver's store does right before it deletes or marks it.
func (h *Request) validateDelete(_ context.Context, existing runtime.Object) error {
	return h.AdmitValidate(admission.Delete, nil, existing)
}
