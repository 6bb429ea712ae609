package subresources

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
)

var bindingGVK = corev1.SchemeGroupVersion.WithKind("Binding")

// bind serves POST pods/NAME/binding (and the legacy POST
// namespaces/NS/bindings, where the pod is the Binding's name): the pod
// gets spec.nodeName, the Binding's annotations, its labels (the node's
// topology labels, which the PodTopologyLabels admission plugin puts
// there, as kube-apiserver copies them while PodTopologyLabelsAdmission
// is on) and a PodScheduled=True condition. 409 if the pod is already bound or being deleted, 404 if it
// does not exist, 422 for a target that is not a node; a Binding with a
// uid or resourceVersion binds only that pod version (409 otherwise).
// It answers a Status with code 201, as kube-apiserver does.
func bind(h *handlers.Request) error {
	var opts metav1.CreateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	obj, err := h.DecodeAs(bindingGVK)
	if err != nil {
		return h.Fail(err)
	}
	if h.Info.Name == "" { // the legacy bindings resource
		h.Info.Name = obj.(*corev1.Binding).Name
	}
	// Admission sees a create of pods/binding, kind Binding.
	h.AdmittingAs(bindingGVK, &opts, opts.DryRun)
	if obj, err = h.AdmitMutate(admission.Create, obj, nil); err != nil {
		return h.Fail(err)
	}
	b := obj.(*corev1.Binding)
	if b.Name != h.Info.Name {
		return h.Fail(apierrors.NewBadRequest("name in URL does not match name in Binding object"))
	}
	if b.Namespace != "" && b.Namespace != h.Info.Namespace {
		return h.Fail(apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
	}
	if errs := validateBinding(b); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(bindingGVK.GroupKind(), b.Name, errs))
	}
	if err := h.AdmitValidate(admission.Create, b, nil); err != nil {
		return h.Fail(err)
	}
	var pre *k8sstorage.Preconditions
	if b.UID != "" || b.ResourceVersion != "" {
		pre = &k8sstorage.Preconditions{}
		if b.UID != "" {
			pre.UID = &b.UID
		}
		if b.ResourceVersion != "" {
			pre.ResourceVersion = &b.ResourceVersion
		}
	}
	tryUpdate := func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		pod := existing.(*corev1.Pod).DeepCopy()
		if pod.DeletionTimestamp != nil {
			return nil, nil, apierrors.NewConflict(h.Resource.GroupResource(), pod.Name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", pod.Name))
		}
		if pod.Spec.NodeName != "" {
			return nil, nil, apierrors.NewConflict(h.Resource.GroupResource(), pod.Name, fmt.Errorf("pod %v is already assigned to node %q", pod.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		for k, v := range b.Annotations {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[k] = v
		}
		if utilfeature.DefaultFeatureGate.Enabled(features.PodTopologyLabelsAdmission) {
			for k, v := range b.Labels {
				if pod.Labels == nil {
					pod.Labels = map[string]string{}
				}
				pod.Labels[k] = v
			}
		}
		setPodCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
		return pod, nil, nil
	}
	if handlers.IsDryRun(opts.DryRun) {
		existing := &corev1.Pod{}
		if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, existing); err != nil {
			return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		if _, _, err := tryUpdate(existing, k8sstorage.ResponseMeta{}); err != nil {
			return h.Fail(err)
		}
	} else if err := h.Store.GuaranteedUpdate(h.Ctx, h.Key(), &corev1.Pod{}, false, pre, tryUpdate, nil); err != nil {
		return h.Fail(storeerr.InterpretUpdateError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	return responses.Object(h.Echo, http.StatusCreated, &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusCreated}, scheme.MetaGV)
}

// validateBinding: the target is a node (kind empty or "Node") and named.
func validateBinding(b *corev1.Binding) field.ErrorList {
	var errs field.ErrorList
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		errs = append(errs, field.NotSupported(field.NewPath("target", "kind"), b.Target.Kind, []string{"Node", "<empty>"}))
	}
	if b.Target.Name == "" {
		errs = append(errs, field.Required(field.NewPath("target", "name"), ""))
	}
	return errs
}

// setPodCondition sets or replaces a condition of its type; the
// transition time moves only when the status does.
func setPodCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	c.LastTransitionTime = now
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return
	}
	status.Conditions = append(status.Conditions, c)
}

// isLegacyBindings reports whether a request is POST
// /api/v1/namespaces/NS/bindings, which has no registry entry.
func IsLegacyBindings(gvr schema.GroupVersionResource) bool {
	return gvr == corev1.SchemeGroupVersion.WithResource("bindings")
}
