package subresources

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// customScale serves a custom resource's scale subresource (autoscaling/v1
// Scale) at the paths its CRD declares: spec.replicas is read from and
// written to specReplicasPath, status.replicas read from
// statusReplicasPath (0 when absent), status.selector from
// labelSelectorPath (a string in selector syntax, empty when unset).
func customScale(h *handlers.Request) error {
	body, patchType, done, err := scaleRequest(h, func(obj runtime.Object) (*autoscalingv1.Scale, error) { return customScaleOf(h, obj) })
	if done {
		return err
	}
	specPath := scalePath(h.Resource.Custom.Scale.SpecReplicasPath)
	out := h.Resource.New()
	err = h.Store.GuaranteedUpdate(h.Ctx, h.Key(), out, false, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		cur, err := customScaleOf(h, existing)
		if err != nil {
			return nil, nil, err
		}
		want, err := wantedScale(h, cur, body, patchType)
		if err != nil {
			return nil, nil, err
		}
		if want.ResourceVersion != "" && want.ResourceVersion != cur.ResourceVersion {
			return nil, nil, apierrors.NewConflict(h.Resource.GroupResource(), h.Info.Name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if want.Spec.Replicas < 0 {
			return nil, nil, apierrors.NewBadRequest("spec.replicas must not be negative")
		}
		updated := existing.DeepCopyObject().(*unstructured.Unstructured)
		if err := unstructured.SetNestedField(updated.Object, int64(want.Spec.Replicas), specPath...); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
		if err := h.Resource.Admit(h.Ctx, updated, existing); err != nil {
			return nil, nil, err
		}
		if handlers.SpecChanged(existing, updated) {
			updated.SetGeneration(updated.GetGeneration() + 1)
		}
		return updated, nil, nil
	}, nil)
	if err != nil {
		return h.Fail(storeerr.InterpretUpdateError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	sc, err := customScaleOf(h, out)
	if err != nil {
		return h.Fail(err)
	}
	return responses.Encode(h.Echo, http.StatusOK, sc, autoscalingGV, handlers.Negotiated(h))
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
