package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
)

// patchTypes are the patch encodings PATCH accepts besides server-side
// apply in YAML (apply.go); apply in CBOR is not served.
var patchTypes = []string{
	string(types.JSONPatchType),
	string(types.MergePatchType),
	string(types.StrategicMergePatchType),
}

// maxJSONPatchOperations bounds the operations of one JSON patch (the
// limit kube-apiserver applies; 413 beyond).
const maxJSONPatchOperations = 10000

func init() {
	// Bound what JSON patch "copy" operations may duplicate in total, as
	// kube-apiserver does (unbounded by default in the library): without
	// it a body under maxBodyBytes could copy a large value thousands of
	// times. Only ever lowered, in case the process sets a smaller limit.
	for {
		cur := atomic.LoadInt64(&jsonpatch.AccumulatedCopySizeLimit)
		if cur > 0 && cur <= maxBodyBytes {
			return
		}
		if atomic.CompareAndSwapInt64(&jsonpatch.AccumulatedCopySizeLimit, cur, maxBodyBytes) {
			return
		}
	}
}

// patch serves PATCH on an object or its status: the body is a JSON patch
// (RFC 6902), a JSON merge patch (RFC 7386) or a strategic merge patch,
// applied to the stored object inside GuaranteedUpdate so concurrent
// writers retry, then stored as an update would be (prepareUpdate).
func (h *Request) patch() error {
	if h.Info.Name == "" {
		return h.Fail(apierrors.NewMethodNotSupported(h.Resource.GroupResource(), "patch"))
	}
	req := h.Echo.Request()
	if isApply(req.Header.Get(echo.HeaderContentType)) {
		return h.serverSideApply()
	}
	patchType, err := RequestPatchType(req.Header.Get(echo.HeaderContentType))
	if err != nil {
		return h.Fail(err)
	}
	if patchType == types.StrategicMergePatchType && h.Resource.Custom != nil {
		// Custom resources have no Go type to read merge keys from.
		return h.Fail(negotiation.NewUnsupportedMediaTypeError([]string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType)}))
	}
	body, err := h.ReadBody()
	if err != nil {
		return h.Fail(err)
	}

	var opts metav1.PatchOptions
	if err := scheme.ParameterCodec.DecodeParameters(req.URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	// Invalid options (a dryRun other than All, force on a non-apply
	// patch, a bad fieldManager or fieldValidation) are 422 Invalid on
	// PatchOptions, as kube-apiserver answers.
	if errs := metav1validation.ValidatePatchOptions(&opts, patchType); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs))
	}
	h.admitting(&opts, opts.DryRun)

	p, err := h.newPatcher(patchType, body)
	if err != nil {
		return h.Fail(err)
	}

	// A patch never creates (but for apply, apply.go).
	return h.upsert(false, nil, func(existing runtime.Object) (runtime.Object, *uint64, error) {
		patched, err := p.apply(existing)
		if err != nil {
			return nil, nil, err
		}
		return h.prepareUpdate(existing, patched)
	})
}

// requestPatchType maps a Content-Type to a supported patch type, or a 415
// UnsupportedMediaType Status.
func RequestPatchType(contentType string) (types.PatchType, error) {
	mediaType, _, _ := strings.Cut(contentType, ";")
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	if slices.Contains(patchTypes, mediaType) {
		return types.PatchType(mediaType), nil
	}
	switch types.PatchType(mediaType) {
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return "", &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: fmt.Sprintf("%s is not supported by this server - accepted patch types: %s, %s",
				mediaType, strings.Join(patchTypes, ", "), types.ApplyYAMLPatchType),
		}}
	}
	return "", negotiation.NewUnsupportedMediaTypeError(patchTypes)
}

// patcher applies one request's patch to the stored object; apply may run
// several times, once per GuaranteedUpdate attempt.
type patcher struct {
	h         *Request
	patchType types.PatchType
	body      []byte
	jsonPatch jsonpatch.Patch
	// bodyStrictErrs are the duplicate fields of the body, unless
	// fieldValidation is Ignore.
	bodyStrictErrs []error
}

// newPatcher checks what can be checked of the patch before reading the
// object: a JSON patch must decode (400) and stay within
// maxJSONPatchOperations (413).
func (h *Request) newPatcher(patchType types.PatchType, body []byte) (*patcher, error) {
	p := &patcher{h: h, patchType: patchType, body: body}
	if h.fieldValidation() != metav1.FieldValidationIgnore {
		p.bodyStrictErrs = patchBodyStrictErrors(patchType == types.JSONPatchType, body)
	}
	if patchType == types.JSONPatchType {
		ops, err := jsonpatch.DecodePatch(body)
		if err != nil {
			return nil, apierrors.NewBadRequest("invalid JSON patch: " + err.Error())
		}
		if len(ops) > maxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
				"the allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, len(ops)))
		}
		p.jsonPatch = ops
	}
	return p, nil
}

// apply returns a new object: existing (left untouched) with the patch
// applied. Errors are API Statuses:
//   - a patch body that is not what its type requires (malformed JSON, a
//     merge patch that is not JSON, a strategic merge patch with a bad
//     directive) is 400 BadRequest;
//   - a well-formed patch that cannot be applied to this object (a JSON
//     patch "test" that fails, a path that does not exist) or whose result
//     is not a valid object of the resource (wrong field types, another
//     kind) is 422 Invalid. kube-apiserver answers 422 for both too; it
//     drops the reason from the message, which we keep;
//   - a patched name or namespace that differs from the URL's is 400
//     BadRequest, as kube-apiserver's name check answers;
//   - unknown fields in the patched object and duplicate fields in the
//     patch follow fieldValidation: Strict rejects them with 422 Invalid
//     (kube-apiserver's answer for patches; create and update answer 400).
func (p *patcher) apply(existing runtime.Object) (runtime.Object, error) {
	h := p.h
	current := existing.DeepCopyObject()
	current.GetObjectKind().SetGroupVersionKind(h.Resource.GVK)
	currentJSON, err := json.Marshal(current)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("encoding the stored object: %w", err))
	}

	var patchedJSON []byte
	switch p.patchType {
	case types.JSONPatchType:
		patchedJSON, err = p.jsonPatch.Apply(currentJSON)
		if err != nil {
			return nil, h.patchInvalid(fmt.Errorf("the JSON patch could not be applied: %w", err))
		}
	case types.MergePatchType:
		patchedJSON, err = jsonpatch.MergePatch(currentJSON, p.body)
		if err != nil {
			// The stored document is well-formed, so the patch is at fault.
			return nil, apierrors.NewBadRequest("invalid JSON merge patch: " + err.Error())
		}
	case types.StrategicMergePatchType:
		patchedJSON, err = strategicpatch.StrategicMergePatch(currentJSON, p.body, h.Resource.New())
		if err != nil {
			return nil, h.strategicMergePatchError(err)
		}
	default:
		return nil, apierrors.NewInternalError(fmt.Errorf("unhandled patch type %q", p.patchType))
	}

	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return nil, apierrors.NewInternalError(errors.New("no JSON serializer"))
	}
	obj, gvk, err := h.bodySerializer(info).Decode(patchedJSON, &h.Resource.GVK, h.Resource.New())
	strictErrs := p.bodyStrictErrs
	if strict, ok := runtime.AsStrictDecodingError(err); ok && obj != nil {
		strictErrs, err = append(slices.Clip(strictErrs), strict.Errors()...), nil
	}
	if err != nil || *gvk != h.Resource.GVK {
		// A patched apiVersion or kind makes the serializer decode
		// another type: say so rather than how that type failed.
		var tm metav1.TypeMeta
		if json.Unmarshal(patchedJSON, &tm) == nil && (tm.APIVersion != "" && tm.APIVersion != h.Resource.GroupVersion().String() || tm.Kind != "" && tm.Kind != h.Resource.GVK.Kind) {
			return nil, h.patchInvalid(fmt.Errorf("the patch may not change apiVersion and kind (to %q, %q; expected %q, %q)",
				tm.APIVersion, tm.Kind, h.Resource.GroupVersion().String(), h.Resource.GVK.Kind))
		}
		if err == nil {
			err = fmt.Errorf("decoded as %s", gvk)
		}
		return nil, h.patchInvalid(fmt.Errorf("the patched object could not be decoded: %w", err))
	}
	// Unknown fields in the patched object, duplicates in the patch:
	// warned of or 422 Invalid, as kube-apiserver answers for patches.
	if err := h.strictFields(strictErrs, h.patchInvalid); err != nil {
		return nil, err
	}
	// Kept as served whatever the patch did to them (removed, say).
	obj.GetObjectKind().SetGroupVersionKind(h.Resource.GVK)
	if err := h.strictFields(h.Resource.Custom.Prune(obj), h.patchInvalid); err != nil {
		return nil, err
	}

	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if m.GetName() != h.Info.Name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), h.Info.Name))
	}
	want := ""
	if h.Resource.Namespaced {
		want = h.Info.Namespace
	}
	switch ns := m.GetNamespace(); {
	case ns == want:
	case ns == "" || want == "":
		// Unset on a namespaced object, or set on a cluster-scoped one:
		// the URL decides.
		m.SetNamespace(want)
	default:
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return obj, nil
}

// patchInvalid is the 422 Invalid Status of a patch that cannot be applied
// or gives an object that is not valid.
func (h *Request) patchInvalid(err error) error {
	return apierrors.NewInvalid(h.Resource.GVK.GroupKind(), h.Info.Name, field.ErrorList{
		field.Invalid(field.NewPath("patch"), field.OmitValueType{}, err.Error()),
	})
}

// strategicMergePatchError maps strategic merge patch errors: malformed
// patches and directives are 400 (as kube-apiserver), anything else about
// applying a well-formed patch to the stored object is 422.
func (h *Request) strategicMergePatchError(err error) error {
	for _, bad := range []error{
		mergepatch.ErrBadJSONDoc, mergepatch.ErrBadPatchFormatForPrimitiveList, mergepatch.ErrBadPatchFormatForRetainKeys,
		mergepatch.ErrBadPatchFormatForSetElementOrderList, mergepatch.ErrUnsupportedStrategicMergePatchFormat,
	} {
		if errors.Is(err, bad) {
			return apierrors.NewBadRequest("invalid strategic merge patch: " + err.Error())
		}
	}
	return h.patchInvalid(fmt.Errorf("the strategic merge patch could not be applied: %w", err))
}
