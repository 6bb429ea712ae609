package subresources

import (
	"fmt"
	"strings"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// customScale serves a custom resource's scale subresource (autoscaling/v1
// Scale) at the paths its CRD declares: spec.replicas is read from and
// written to specReplicasPath, status.replicas read from
// statusReplicasPath (0 when absent), status.selector from
// labelSelectorPath (a string in selector syntax, empty when unset).
func customScale(h *handlers.Request) error {
	specPath := scalePath(h.Resource.Custom.Scale.SpecReplicasPath)
	scaleOf := func(obj runtime.Object) (*autoscalingv1.Scale, error) { return customScaleOf(h, obj) }
	return updateScale(h, scaleOf, func(existing runtime.Object, replicas int32) (runtime.Object, error) {
		updated := existing.DeepCopyObject().(*unstructured.Unstructured)
		if err := unstructured.SetNestedField(updated.Object, int64(replicas), specPath...); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if err := h.Resource.Admit(h.Ctx, updated, existing); err != nil {
			return nil, err
		}
		return updated, nil
	})
}

// customScaleOf reads a custom resource's Scale.
func customScaleOf(h *handlers.Request, obj runtime.Object) (*autoscalingv1.Scale, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("custom resource is a %T", obj))
	}
	m, _ := meta.Accessor(u)
	sc := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp(),
	}}
	paths := h.Resource.Custom.Scale
	if n, ok, err := unstructured.NestedInt64(u.Object, scalePath(paths.SpecReplicasPath)...); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("%s: %w", paths.SpecReplicasPath, err))
	} else if ok {
		sc.Spec.Replicas = int32(n)
	}
	if n, ok, _ := unstructured.NestedInt64(u.Object, scalePath(paths.StatusReplicasPath)...); ok {
		sc.Status.Replicas = int32(n)
	}
	if paths.LabelSelectorPath != nil {
		if sel, ok, _ := unstructured.NestedString(u.Object, scalePath(*paths.LabelSelectorPath)...); ok {
			sc.Status.Selector = sel
		}
	}
	return sc, nil
}

// scalePath splits a CRD's JSON path (".spec.replicas") into fields.
func scalePath(p string) []string {
	return strings.Split(strings.TrimPrefix(p, "."), ".")
}
