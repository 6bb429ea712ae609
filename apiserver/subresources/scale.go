package subresources

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

var autoscalingGV = autoscalingv1.SchemeGroupVersion

// Scale serves the scale subresource: a custom resource's through its
// CRD's scale paths, a workload's through spec.replicas.
func Scale(h *handlers.Request) error {
	if h.Resource.Custom != nil {
		return customScale(h)
	}
	return scale(h)
}

// scale serves the scale subresource (autoscaling/v1 Scale) of workloads
// with spec.replicas: GET reads it, PUT and PATCH set spec.replicas (a
// Scale carrying a stale resourceVersion conflicts).
func scale(h *handlers.Request) error {
	return updateScale(h, scaleOf, func(existing runtime.Object, replicas int32) (runtime.Object, error) {
		updated := existing.DeepCopyObject()
		reflect.ValueOf(updated).Elem().FieldByName("Spec").FieldByName("Replicas").Set(reflect.ValueOf(&replicas))
		return updated, nil
	})
}

// updateScale serves a scale subresource over scaleOf, which reads an
// object's Scale: GET answers it; PUT and PATCH check the wanted Scale
// against the stored object's (a stale resourceVersion is 409, negative
// replicas 400), have setReplicas write spec.replicas into a copy, bump
// the generation when the spec changed, and answer the new Scale.
func updateScale(h *handlers.Request, scaleOf func(runtime.Object) (*autoscalingv1.Scale, error),
	setReplicas func(existing runtime.Object, replicas int32) (runtime.Object, error)) error {
	body, patchType, done, err := scaleRequest(h, scaleOf)
	if done {
		return err
	}
	out := h.Resource.New()
	err = h.Store.GuaranteedUpdate(h.Ctx, h.Key(), out, false, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		cur, err := scaleOf(existing)
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
		updated, err := setReplicas(existing, want.Spec.Replicas)
		if err != nil {
			return nil, nil, err
		}
		if handlers.SpecChanged(existing, updated) {
			m, _ := meta.Accessor(updated)
			m.SetGeneration(m.GetGeneration() + 1)
		}
		return updated, nil, nil
	}, nil)
	if err != nil {
		return h.Fail(storeerr.InterpretUpdateError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	sc, err := scaleOf(out)
	if err != nil {
		return h.Fail(err)
	}
	return responses.Encode(h.Echo, http.StatusOK, sc, autoscalingGV, handlers.Negotiated(h))
}

// wantedScale is the Scale a PUT body states, or the current one patched.
func wantedScale(h *handlers.Request, cur *autoscalingv1.Scale, body []byte, patchType types.PatchType) (*autoscalingv1.Scale, error) {
	if patchType == "" {
		want := &autoscalingv1.Scale{}
		if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(autoscalingGV), body, want); err != nil {
			return nil, apierrors.NewBadRequest("invalid Scale: " + err.Error())
		}
		return want, nil
	}
	curJSON, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	var patched []byte
	switch patchType {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		patched, err = p.Apply(curJSON)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	case types.MergePatchType:
		if patched, err = jsonpatch.MergePatch(curJSON, body); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	case types.StrategicMergePatchType:
		if patched, err = strategicpatch.StrategicMergePatch(curJSON, body, &autoscalingv1.Scale{}); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	default:
		return nil, apierrors.NewBadRequest("unsupported patch type " + string(patchType))
	}
	want := &autoscalingv1.Scale{}
	if err := json.Unmarshal(patched, want); err != nil {
		return nil, apierrors.NewBadRequest("invalid Scale: " + err.Error())
	}
	// A patch leaves the resourceVersion it read, which must not count
	// as a precondition unless the patch set it.
	if want.ResourceVersion == cur.ResourceVersion {
		want.ResourceVersion = ""
	}
	return want, nil
}

// scaleOf reads a workload's Scale: spec.replicas, status.replicas and the
// selector.
func scaleOf(obj runtime.Object) (*autoscalingv1.Scale, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(obj).Elem()
	spec, status := v.FieldByName("Spec"), v.FieldByName("Status")
	sc := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp(),
	}}
	if r, ok := spec.FieldByName("Replicas").Interface().(*int32); ok && r != nil {
		sc.Spec.Replicas = *r
	} else {
		sc.Spec.Replicas = 1
	}
	if r, ok := status.FieldByName("Replicas").Interface().(int32); ok {
		sc.Status.Replicas = r
	}
	switch sel := spec.FieldByName("Selector").Interface().(type) {
	case *metav1.LabelSelector:
		if sel != nil {
			s, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			sc.Status.Selector = s.String()
		}
	case map[string]string: // replication controllers
		sc.Status.Selector = labels.SelectorFromSet(sel).String()
	}
	return sc, nil
}

// scaleRequest serves GET of a scale subresource (the Scale scaleOf makes
// of the object) and refuses verbs other than update and patch (done is
// then true and err what the handler returns); for update and patch it
// returns the body and, for patch, its type.
func scaleRequest(h *handlers.Request, scaleOf func(runtime.Object) (*autoscalingv1.Scale, error)) (body []byte, patchType types.PatchType, done bool, err error) {
	switch h.Info.Verb {
	case "get":
		obj := h.Resource.New()
		if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, obj); err != nil {
			return nil, "", true, h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		sc, err := scaleOf(obj)
		if err != nil {
			return nil, "", true, h.Fail(err)
		}
		return nil, "", true, responses.Encode(h.Echo, http.StatusOK, sc, autoscalingGV, handlers.Negotiated(h))
	case "update", "patch":
	default:
		return nil, "", true, h.Fail(apierrors.NewMethodNotSupported(h.Resource.GroupResource(), h.Info.Verb))
	}
	if body, err = h.ReadBody(); err != nil {
		return nil, "", true, h.Fail(err)
	}
	if h.Info.Verb == "patch" {
		if patchType, err = handlers.RequestPatchType(h.Echo.Request().Header.Get("Content-Type")); err != nil {
			return nil, "", true, h.Fail(err)
		}
	}
	return body, patchType, false, nil
}
