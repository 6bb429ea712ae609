package handlers

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// applyFieldValidation checks an apply configuration (already parsed into
// applied) for duplicate fields (YAML's strict decoder over the body) and
// unknown ones (a strict decode into the resource's type), and follows
// fieldValidation: Strict rejects them with 400 BadRequest, Warn adds a
// Warning header per field, Ignore says nothing. Unknown fields are then
// removed from applied: structured merge knows only the schema's fields
// and would fail on them (kube-apiserver answers a 500 there whatever the
// directive; removing them is what Ignore and Warn promise).
func (h *Request) applyFieldValidation(body []byte, applied *unstructured.Unstructured) error {
	var strictErrs, unknown []error
	if err := yaml.UnmarshalStrict(body, &map[string]any{}); err != nil {
		// The body parsed leniently already: what is left is duplicates.
		strictErrs = append(strictErrs, err)
	}
	js, err := json.Marshal(applied.Object)
	if err != nil {
		return apierrors.NewBadRequest("the apply configuration cannot be encoded as JSON: " + err.Error())
	}
	if info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON); ok && info.StrictSerializer != nil {
		_, _, err := info.StrictSerializer.Decode(js, &h.Resource.GVK, h.Resource.New())
		if strict, ok := runtime.AsStrictDecodingError(err); ok {
			for _, e := range strict.Errors() {
				if _, ok := unknownFieldPath(e); ok {
					unknown = append(unknown, e)
				} else {
					strictErrs = append(strictErrs, e)
				}
			}
		}
	}
	gvk := h.Resource.GVK
	if err := h.strictFields(append(strictErrs, unknown...), h.decodeStrictError(&gvk)); err != nil {
		return err
	}
	for _, e := range unknown {
		path, _ := unknownFieldPath(e)
		removeFieldPath(applied.Object, path)
	}
	return nil
}

// applyTypeError turns structured merge's failure to type an apply
// configuration (a field of the wrong type, say) into a 400 BadRequest;
// other errors are returned as they are.
func applyTypeError(err error) error {
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) {
		return err
	}
	if strings.HasPrefix(err.Error(), "failed to create typed patch object") {
		return apierrors.NewBadRequest(err.Error())
	}
	return err
}

// unknownFieldPath returns the path of a strict decoder's `unknown field
// "spec.foo"` error.
func unknownFieldPath(err error) (string, bool) {
	quoted, ok := strings.CutPrefix(err.Error(), "unknown field ")
	if !ok {
		return "", false
	}
	path, err := strconv.Unquote(quoted)
	return path, err == nil
}

// removeFieldPath deletes the field at path ("spec.containers[0].foo", as
// the strict decoder writes paths) from obj. A path that does not lead to
// a field (a field name with a "." or "[" in it, which the notation
// cannot tell apart) removes nothing.
func removeFieldPath(obj map[string]any, path string) {
	var cur any = obj
	parts := strings.Split(path, ".")
	for i, part := range parts {
		name, indexes, _ := strings.Cut(part, "[")
		m, ok := cur.(map[string]any)
		if !ok {
			return
		}
		if i == len(parts)-1 && indexes == "" {
			delete(m, name)
			return
		}
		cur = m[name]
		if indexes == "" {
			continue
		}
		for _, idx := range strings.Split(strings.TrimSuffix(indexes, "]"), "][") {
			n, err := strconv.Atoi(idx)
			list, ok := cur.([]any)
			if err != nil || !ok || n < 0 || n >= len(list) {
				return
			}
			cur = list[n]
		}
	}
}
