// Package apiserver is sqlkube's Kubernetes API server: discovery and the
// REST API of the built-in resources over storage/, on echo. Types, codecs,
// selectors and validation helpers are the upstream ones (k8s.io/api,
// k8s.io/apimachinery); there are no internal versions, so every object is
// handled in the version it is served and stored in.
package apiserver

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

var (
	// Scheme knows every served type and meta.k8s.io's (Status, Table,
	// list options).
	Scheme = runtime.NewScheme()
	// Codecs encode and decode JSON, YAML and protobuf.
	Codecs serializer.CodecFactory
	// parameterCodec decodes query parameters into option structs.
	parameterCodec runtime.ParameterCodec
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(metav1.AddMetaToScheme(Scheme))
	Codecs = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
}
