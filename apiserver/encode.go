package apiserver

import (
	"github.com/labstack/echo/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
)

// transforms allows the media type transformations kubectl asks for:
// Table (server-side printing) in meta.k8s.io v1 and v1beta1.
type transforms struct{}

func (transforms) AllowsMediaTypeTransform(mimeType, mimeSubType string, gvk *schema.GroupVersionKind) bool {
	if gvk == nil {
		return true
	}
	return gvk.Group == metav1.GroupName && (gvk.Version == "v1" || gvk.Version == "v1beta1") && gvk.Kind == "Table"
}
func (transforms) AllowsServerVersion(string) bool  { return false }
func (transforms) AllowsStreamSchema(s string) bool { return s == "watch" }

// negotiate picks the response encoding from the Accept header (JSON when
// nothing acceptable is offered, as kube-apiserver does for errors).
func negotiate(c echo.Context) (negotiation.MediaTypeOptions, runtime.SerializerInfo) {
	opts, info, err := negotiation.NegotiateOutputMediaType(c.Request(), Codecs, transforms{})
	if err != nil {
		info, _ = runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		return negotiation.MediaTypeOptions{}, info
	}
	return opts, info
}

// writeObject encodes obj in gv with the negotiated encoding.
func writeObject(c echo.Context, code int, obj runtime.Object, gv schema.GroupVersion) error {
	_, info := negotiate(c)
	return encodeWith(c, code, obj, gv, info)
}

func encodeWith(c echo.Context, code int, obj runtime.Object, gv schema.GroupVersion, info runtime.SerializerInfo) error {
	enc := Codecs.EncoderForVersion(info.Serializer, gv)
	if _, ok := obj.(runtime.Unstructured); ok {
		// Custom resources (and their lists) are written as they are, in
		// JSON or YAML: they have no protobuf encoding.
		if info.MediaType != runtime.ContentTypeJSON && info.MediaType != runtime.ContentTypeYAML {
			info, _ = runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		}
		enc = info.Serializer
	}
	c.Response().Header().Set(echo.HeaderContentType, info.MediaType)
	c.Response().WriteHeader(code)
	return enc.Encode(obj, c.Response())
}
