package handlers

import (
	"fmt"
	"strings"
	"sync"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/yaml"
)

// fieldManagers builds and keeps one managedfields.FieldManager per
// resource and subresource, over the type converter made from the OpenAPI
// schemas (list and map types as Kubernetes declares them).
type FieldManagers struct {
	converter managedfields.TypeConverter
	mu        sync.Mutex
	byKey     map[string]*managedfields.FieldManager
}

// NewFieldManagers builds the built-in resources' field managers over
// their OpenAPI definitions (made at first use, per resource).
func NewFieldManagers(defs map[string]*spec.Schema) (*FieldManagers, error) {
	tc, err := managedfields.NewTypeConverter(defs, false)
	if err != nil {
		return nil, err
	}
	return &FieldManagers{converter: registry.SkipManagedFields(tc), byKey: map[string]*managedfields.FieldManager{}}, nil
}

func (f *FieldManagers) get(r *registry.Resource, subresource string) (*managedfields.FieldManager, error) {
	if r.Custom != nil {
		return r.Custom.Fields.Get(subresource)
	}
	key := r.GVK.String() + "/" + subresource
	f.mu.Lock()
	defer f.mu.Unlock()
	if fm, ok := f.byKey[key]; ok {
		return fm, nil
	}
	// The converter does not copy, as kube-apiserver's: defaulting that
	// shares a map between fields (a Job without labels takes its pod
	// template's) stays shared through an apply, as it does through a
	// POST. The objects it converts are the request's own.
	fm, err := managedfields.NewDefaultFieldManager(f.converter, runtime.UnsafeObjectConvertor(scheme.Scheme), scheme.Scheme, scheme.Scheme, r.GVK, r.GroupVersion(), subresource, nil)
	if err != nil {
		return nil, err
	}
	f.byKey[key] = fm
	return fm, nil
}

// managerName is who a write is recorded for in managedFields: the
// fieldManager option, else the client's user agent up to its first "/"
// (as kube-apiserver does).
func (h *Request) managerName() string {
	if m := h.Echo.QueryParam("fieldManager"); m != "" {
		return m
	}
	ua := h.Echo.Request().UserAgent()
	if i := strings.Index(ua, "/"); i >= 0 {
		ua = ua[:i]
	}
	if len(ua) > 128 {
		ua = ua[:128]
	}
	return ua
}

// trackManagedFields records in updated's managedFields what this write
// changed from live (an empty object for a create). Failing to track is
// not an error for the write, as upstream.
func (h *Request) trackManagedFields(live, updated runtime.Object) runtime.Object {
	fm, err := h.API.FieldManagers.get(h.Resource, h.Info.Subresource)
	if err != nil {
		return updated
	}
	return fm.UpdateNoErrors(live, updated, h.managerName())
}

// isApply reports whether a PATCH is server-side apply.
func isApply(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), string(types.ApplyYAMLPatchType))
}

// serverSideApply serves PATCH with application/apply-patch+yaml: the body
// is the applier's intent (YAML or JSON), merged into the live object by
// structured-merge-diff with managedFields; fields another manager owns
// conflict (409 with the conflicts as causes) unless force=true. A missing
// object is created. Unknown and duplicate fields follow fieldValidation
// (apply_fieldvalidation.go).
func (h *Request) serverSideApply() error {
	req := h.Echo.Request()
	body, err := h.ReadBody()
	if err != nil {
		return h.Fail(err)
	}
	var opts metav1.PatchOptions
	if err := scheme.ParameterCodec.DecodeParameters(req.URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	if errs := metav1validation.ValidatePatchOptions(&opts, types.ApplyYAMLPatchType); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs))
	}
	h.admitting(&opts, opts.DryRun)
	applied := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(body, &applied.Object); err != nil {
		return h.Fail(apierrors.NewBadRequest("error decoding YAML: " + err.Error()))
	}
	if applied.Object == nil {
		return h.Fail(apierrors.NewBadRequest("the apply configuration is empty"))
	}
	if gvk := applied.GroupVersionKind(); gvk != h.Resource.GVK {
		return h.Fail(apierrors.NewBadRequest(fmt.Sprintf("the apply configuration is a %s, not a %s", gvk, h.Resource.GVK)))
	}
	if applied.GetName() != h.Info.Name {
		return h.Fail(apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", applied.GetName(), h.Info.Name)))
	}
	if ns := applied.GetNamespace(); h.Resource.Namespaced && ns != "" && ns != h.Info.Namespace {
		return h.Fail(apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
	}
	if h.Resource.Namespaced {
		applied.SetNamespace(h.Info.Namespace)
	}
	if err := h.applyFieldValidation(body, applied); err != nil {
		return h.Fail(err)
	}
	fm, err := h.API.FieldManagers.get(h.Resource, h.Info.Subresource)
	if err != nil {
		return h.Fail(err)
	}
	force := opts.Force != nil && *opts.Force
	h.applying = true // managedFields come from Apply, not from tracking the update

	// A missing object is created through the create path (subresources
	// are never created); an existing one is updated.
	newObj := func() (runtime.Object, error) {
		live := h.Resource.New()
		lm, _ := meta.Accessor(live)
		lm.SetName(h.Info.Name)
		if h.Resource.Namespaced {
			lm.SetNamespace(h.Info.Namespace)
		}
		out, err := fm.Apply(live, applied.DeepCopy(), opts.FieldManager, force)
		if err != nil {
			return nil, applyTypeError(err)
		}
		return out, nil
	}
	return h.upsert(h.Info.Subresource == "", newObj, func(existing runtime.Object) (runtime.Object, *uint64, error) {
		out, err := fm.Apply(existing, applied.DeepCopy(), opts.FieldManager, force)
		if err != nil {
			return nil, nil, applyTypeError(err)
		}
		return h.prepareUpdate(existing, out)
	})
}
