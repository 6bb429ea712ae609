package subresources

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	noderegistry "k8s.io/kubernetes/pkg/registry/core/node"
	podregistry "k8s.io/kubernetes/pkg/registry/core/pod"
)

// The proxy subresources of pods, services and nodes, as kube-apiserver
// serves them. The name in the path says where to ("NAME", "NAME:PORT",
// "SCHEME:NAME:PORT"; a service's port by number or name), Kubernetes'
// registries say what that is (a pod's IP; one of a service's ready
// Endpoints addresses that is a pod's; a node's kubelet, or another port
// of the node), the rest of the path below .../proxy is appended, and
// Kubernetes' upgrade-aware proxy carries the request (websockets and
// other upgrades too) after CONNECT admission. Pods and other node ports
// are reached through h.API.ProxyTransport, kubelets as logs and exec
// reach them.

// proxyMethods are the methods the proxies take, as kube-apiserver's.
var proxyMethods = []string{
	http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions,
}

// podProxy serves pods/proxy.
func podProxy(h *handlers.Request) error {
	opts := &corev1.PodProxyOptions{}
	if err := proxyOptions(h, opts); err != nil {
		return h.Fail(err)
	}
	location, transport, err := podregistry.ResourceLocation(h.Ctx, coreGetter{h: h, resource: "pods"}, h.API.ProxyTransport, h.Info.Name)
	if err != nil {
		return h.Fail(err)
	}
	return proxyTo(h, location, transport, opts.Path)
}

// serviceProxy serves services/proxy.
func serviceProxy(h *handlers.Request) error {
	opts := &corev1.ServiceProxyOptions{}
	if err := proxyOptions(h, opts); err != nil {
		return h.Fail(err)
	}
	services, err := serviceLocator(h)
	if err != nil {
		return h.Fail(apierrors.NewInternalError(err))
	}
	location, transport, err := services.ResourceLocation(h.Ctx, h.Info.Name)
	if err != nil {
		return h.Fail(err)
	}
	return proxyTo(h, location, transport, opts.Path)
}

// nodeProxy serves nodes/proxy: the kubelet (its port, or none named)
// with the kubelet client, another port of the node with the proxy
// transport.
func nodeProxy(h *handlers.Request) error {
	opts := &corev1.NodeProxyOptions{}
	if err := proxyOptions(h, opts); err != nil {
		return h.Fail(err)
	}
	conn, err := h.API.Kubelets()
	if err != nil {
		return h.Fail(err)
	}
	location, transport, err := noderegistry.ResourceLocation(coreGetter{h: h, resource: "nodes"}, conn, h.API.ProxyTransport, h.Ctx, h.Info.Name)
	if err != nil {
		return h.Fail(err)
	}
	return proxyTo(h, location, transport, opts.Path)
}

// proxyOptions decodes the request's proxy options (into, a served
// version) as kube-apiserver's connect handler does: the query, with
// "path" the request's path below .../proxy (a leading slash; a trailing
// one if the request has one), and admits the connection.
func proxyOptions(h *handlers.Request, into runtime.Object) error {
	query := url.Values{}
	for k, v := range h.Echo.Request().URL.Query() {
		query[k] = v
	}
	path := ""
	if len(h.Info.Parts) > 3 { // RESOURCE NAME proxy PATH...
		path = "/" + strings.Join(h.Info.Parts[3:], "/")
	}
	if strings.HasSuffix(h.Info.Path, "/") && !strings.HasSuffix(path, "/") {
		path += "/"
	}
	query["path"] = []string{path}
	if err := legacyscheme.ParameterCodec.DecodeParameters(query, corev1.SchemeGroupVersion, into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return admitConnect(h, into)
}

// admitConnect admits a connect request with its options (served
// version).
func admitConnect(h *handlers.Request, opts runtime.Object) error {
	kinds, _, err := legacyscheme.Scheme.ObjectKinds(opts)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return h.AdmitConnect(kinds[0], opts)
}

// proxyTo proxies the request to path below location, as the registries'
// ProxyREST.Connect do (links and redirects in the answer rewritten to go
// through the proxy).
func proxyTo(h *handlers.Request, location *url.URL, transport http.RoundTripper, path string) error {
	location.Path = utilnet.JoinPreservingTrailingSlash(location.Path, path)
	handler := proxy.NewUpgradeAwareHandler(location, transport, true, false, proxy.NewErrorResponder(proxyErrors{h}))
	handler.ServeHTTP(h.Echo.Response(), h.Echo.Request())
	return nil
}
