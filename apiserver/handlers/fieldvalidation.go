package handlers

import (
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	kjson "sigs.k8s.io/json"
)

// fieldValidation is the request's fieldValidation directive: Ignore,
// Warn or Strict, Warn when absent (kube-apiserver's default since 1.27).
// The options' validation has rejected any other value before a body is
// decoded.
func (h *Request) fieldValidation() string {
	if d := h.Echo.QueryParam("fieldValidation"); d != "" {
		return d
	}
	return metav1.FieldValidationWarn
}

// bodySerializer is the decoder of a body in info's encoding: the strict
// one (it reports unknown and duplicate fields as a
// runtime.StrictDecodingError, with the object fully decoded) unless
// those are ignored. Protobuf has no strict decoder: its bodies have no
// unknown fields a client could mean.
func (h *Request) bodySerializer(info runtime.SerializerInfo) runtime.Serializer {
	if info.StrictSerializer != nil && h.fieldValidation() != metav1.FieldValidationIgnore {
		return info.StrictSerializer
	}
	return info.Serializer
}

// strictFields applies the directive to the unknown and duplicate fields
// a strict decode found: nothing for Ignore, a Warning response header
// per field for Warn, and for Strict the error reject makes of the
// runtime.StrictDecodingError listing them all
// (`strict decoding error: unknown field "spec.foo", ...`).
func (h *Request) strictFields(errs []error, reject func(error) error) error {
	if len(errs) == 0 {
		return nil
	}
	switch h.fieldValidation() {
	case metav1.FieldValidationIgnore:
		return nil
	case metav1.FieldValidationWarn:
		for _, e := range errs {
			for _, text := range splitYAMLErrors(e.Error()) {
				h.warn(text)
			}
		}
		return nil
	}
	return reject(runtime.NewStrictDecodingError(errs))
}

// warn adds a `Warning: 299 - "text"` response header, once per text
// (a patch applied again after a conflict finds the same fields again).
func (h *Request) warn(text string) {
	v, err := utilnet.NewWarningHeader(299, "-", text)
	if err != nil {
		return // text that cannot be a header value (control characters)
	}
	hdr := h.Echo.Response().Header()
	if !slices.Contains(hdr.Values("Warning"), v) {
		hdr.Add("Warning", v)
	}
}

// decodeStrictError is the 400 BadRequest of a create or update body with
// fields Strict rejects, worded as kube-apiserver words it:
// `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict
// decoding error: unknown field "spec.foo"`.
func (h *Request) decodeStrictError(gvk *schema.GroupVersionKind) func(error) error {
	return func(err error) error {
		kind, version := h.Resource.GVK.Kind, h.Resource.GVK.Version
		if gvk != nil && gvk.Kind != "" {
			kind, version = gvk.Kind, gvk.Version
		}
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", kind, version, h.Resource.GVK.Kind, err))
	}
}

// YAML's strict errors come as one error with a line per duplicate key.
const (
	yamlErrorsShort = "yaml: unmarshal errors:\n"
	yamlErrorsLong  = "error converting YAML to JSON: yaml: unmarshal errors:\n"
)

// splitYAMLErrors splits the YAML decoder's one error about several
// duplicate keys into one text per key; other errors stay whole.
func splitYAMLErrors(msg string) []string {
	rest, ok := strings.CutPrefix(msg, yamlErrorsLong)
	if !ok {
		if rest, ok = strings.CutPrefix(msg, yamlErrorsShort); !ok {
			return []string{msg}
		}
	}
	var out []string
	for _, line := range strings.Split(rest, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// jsonPatchOp is what a JSON patch operation may hold, for finding
// duplicate fields in one.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	From  string `json:"from"`
	Value any    `json:"value"`
}

// patchBodyStrictErrors finds duplicate fields in a patch body (unknown
// fields are found in the patched object): a merge or strategic merge
// patch is an object, a JSON patch a list of operations (its errors are
// prefixed "json patch", as kube-apiserver's). A body that does not parse
// gives none: applying it reports that.
func patchBodyStrictErrors(jsonPatch bool, body []byte) []error {
	var (
		errs []error
		err  error
	)
	if jsonPatch {
		var ops []jsonPatchOp
		errs, err = kjson.UnmarshalStrict(body, &ops)
		for i, e := range errs {
			errs[i] = fmt.Errorf("json patch %w", e)
		}
	} else {
		var m map[string]any
		errs, err = kjson.UnmarshalStrict(body, &m)
	}
	if err != nil {
		return nil
	}
	return errs
}
