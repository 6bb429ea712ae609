package responses

import (
	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
)

// Restrictions are the media type transformations one endpoint allows,
// by kube-apiserver's rule (its handlers' RequestScope.AllowsMediaTypeTransform),
// in meta.k8s.io v1 and v1beta1: PartialObjectMetadata(List) (the
// metadata client: garbage collector, namespace deletion, quota)
// everywhere; Table (server-side printing, kubectl), in JSON or YAML only,
// where the endpoint has a table convertor. Nothing else.
type Restrictions struct {
	// Table: the endpoint can print what it answers as a Table (its
	// kube-apiserver storage is a TableConvertor). The reviews cannot.
	Table bool
}

func (r Restrictions) AllowsMediaTypeTransform(mimeType, mimeSubType string, gvk *schema.GroupVersionKind) bool {
	if gvk == nil {
		return true
	}
	if gvk.Group != metav1.GroupName || (gvk.Version != "v1" && gvk.Version != "v1beta1") {
		return false
	}
	switch gvk.Kind {
	case "Table":
		return r.Table && mimeType == "application" && (mimeSubType == "json" || mimeSubType == "yaml")
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return true
	}
	return false
}

func (Restrictions) AllowsServerVersion(string) bool  { return false }
func (Restrictions) AllowsStreamSchema(s string) bool { return s == "watch" }

// asPartialMetadata converts obj (an object or a list) to what a request
// for as=PartialObjectMetadata(List) gets: 406 when the kind asked for does
// not match (a list for one object, or one object for a list), as upstream.
func PartialMetadata(obj runtime.Object, convert *schema.GroupVersionKind) (runtime.Object, error) {
	wantList := convert.Kind == "PartialObjectMetadataList"
	partial := func(o runtime.Object) (*metav1.PartialObjectMetadata, error) {
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		p := &metav1.PartialObjectMetadata{ObjectMeta: *ObjectMeta(m)}
		p.APIVersion, p.Kind = convert.GroupVersion().String(), "PartialObjectMetadata"
		return p, nil
	}
	if !meta.IsListType(obj) {
		if wantList {
			return nil, negotiation.NewNotAcceptableError([]string{"PartialObjectMetadata for a single object"})
		}
		return partial(obj)
	}
	if !wantList {
		return nil, negotiation.NewNotAcceptableError([]string{"PartialObjectMetadataList for a list"})
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return nil, err
	}
	out := &metav1.PartialObjectMetadataList{}
	out.APIVersion, out.Kind = convert.GroupVersion().String(), "PartialObjectMetadataList"
	out.ResourceVersion, out.Continue, out.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	err = meta.EachListItem(obj, func(item runtime.Object) error {
		p, err := partial(item)
		if err == nil {
			out.Items = append(out.Items, *p)
		}
		return err
	})
	return out, err
}

// NegotiateFor picks the response encoding from the Accept header within
// what r allows: a 406 Not Acceptable error when nothing offered is, as
// kube-apiserver's handlers answer before they do anything else.
func NegotiateFor(c echo.Context, r Restrictions) (negotiation.MediaTypeOptions, runtime.SerializerInfo, error) {
	return negotiation.NegotiateOutputMediaType(c.Request(), scheme.Codecs, r)
}

// negotiate picks the response encoding from the Accept header (JSON when
// nothing acceptable is offered, as kube-apiserver does for errors), any
// transformation allowed.
func Negotiate(c echo.Context) (negotiation.MediaTypeOptions, runtime.SerializerInfo) {
	opts, info, err := NegotiateFor(c, Restrictions{Table: true})
	if err != nil {
		info, _ = runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		return negotiation.MediaTypeOptions{}, info
	}
	return opts, info
}

// writeObject encodes obj in gv with the negotiated encoding.
func Object(c echo.Context, code int, obj runtime.Object, gv schema.GroupVersion) error {
	_, info := Negotiate(c)
	return Encode(c, code, obj, gv, info)
}

// Encode writes obj in gv with the serializer info (an encoding the
// client negotiated).
func Encode(c echo.Context, code int, obj runtime.Object, gv schema.GroupVersion, info runtime.SerializerInfo) error {
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, gv)
	if _, ok := obj.(runtime.Unstructured); ok {
		// Custom resources (and their lists) are written as they are, in
		// JSON or YAML: they have no protobuf encoding.
		if info.MediaType != runtime.ContentTypeJSON && info.MediaType != runtime.ContentTypeYAML {
			info, _ = runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		}
		enc = info.Serializer
	}
	c.Response().Header().Set(echo.HeaderContentType, info.MediaType)
	c.Response().WriteHeader(code)
	return enc.Encode(obj, c.Response())
}

// metaOf copies an object's metadata (a PartialObjectMetadata's, or a
// Table row's).
func ObjectMeta(m metav1.Object) *metav1.ObjectMeta {
	if om, ok := m.(*metav1.ObjectMeta); ok {
		return om.DeepCopy()
	}
	return &metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		Generation: m.GetGeneration(), CreationTimestamp: m.GetCreationTimestamp(), DeletionTimestamp: m.GetDeletionTimestamp(),
		Labels: m.GetLabels(), Annotations: m.GetAnnotations(), OwnerReferences: m.GetOwnerReferences(), Finalizers: m.GetFinalizers(),
	}
}
