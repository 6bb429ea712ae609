package apiserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericrest "k8s.io/apiserver/pkg/registry/generic/rest"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/core/validation"
	kubeletclient "k8s.io/kubernetes/pkg/kubelet/client"
	podregistry "k8s.io/kubernetes/pkg/registry/core/pod"
)

// The subresources that reach a pod's kubelet (logs, exec, attach,
// port-forward) and a node's (proxy), as kube-apiserver serves them: the
// location comes from Kubernetes' pod registry, the connection from its
// kubelet client (the API server's kubelet-client certificate; the
// kubelet's serving certificate verified against Config.KubeletCAFile),
// and the streams from its upgrade-aware proxy, with the websocket
// translations kubectl 1.30+ asks for.

// kubeletPreferredAddressTypes is the order node addresses are tried in:
// the InternalIP first, as nodes here seldom have resolvable names.
var kubeletPreferredAddressTypes = []string{
	string(corev1.NodeInternalIP), string(corev1.NodeHostName), string(corev1.NodeInternalDNS),
	string(corev1.NodeExternalDNS), string(corev1.NodeExternalIP),
}

// newKubeletConnections builds how the server reaches kubelets.
func (s *Server) newKubeletConnections() (kubeletclient.ConnectionInfoGetter, error) {
	cfg := kubeletclient.KubeletClientConfig{
		Port:                  10250,
		PreferredAddressTypes: kubeletPreferredAddressTypes,
		TLSClientConfig: kubeletclient.KubeletTLSConfig{
			CertFile: s.cfg.KubeletClientCertFile, KeyFile: s.cfg.KubeletClientKeyFile, CAFile: s.cfg.KubeletCAFile,
		},
	}
	nodes := kubeletclient.NodeGetterFunc(func(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
		node := &corev1.Node{}
		r, _ := s.registry.Lookup(corev1.SchemeGroupVersion.WithResource("nodes"))
		if err := s.storageFor(r).Get(ctx, r.Key("", name), k8sstorage.GetOptions{}, node); err != nil {
			return nil, storeerr.InterpretGetError(err, corev1.Resource("nodes"), name)
		}
		return node, nil
	})
	return kubeletclient.NewNodeConnectionInfoGetter(nodes, cfg)
}

// podGetter reads pods (in the request's namespace) as the internal type
// the pod registry's location functions take.
type podGetter struct{ h *handler }

func (g podGetter) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	v1pod := &corev1.Pod{}
	if err := g.h.st.Get(ctx, g.h.r.Key(request.NamespaceValue(ctx), name), k8sstorage.GetOptions{}, v1pod); err != nil {
		return nil, storeerr.InterpretGetError(err, corev1.Resource("pods"), name)
	}
	pod := &api.Pod{}
	if err := legacyscheme.Scheme.Convert(v1pod, pod, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return pod, nil
}

// kubeletConn is the server's kubelet connection getter, made once.
func (h *handler) kubeletConn() (kubeletclient.ConnectionInfoGetter, error) {
	h.s.kubeletOnce.Do(func() { h.s.kubelets, h.s.kubeletErr = h.s.newKubeletConnections() })
	if h.s.kubeletErr != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("kubelet client: %v", h.s.kubeletErr))
	}
	return h.s.kubelets, nil
}

// decodeQuery decodes the request's query into an internal options type.
func (h *handler) decodeQuery(into runtime.Object) error {
	if err := legacyscheme.ParameterCodec.DecodeParameters(h.c.Request().URL.Query(), corev1.SchemeGroupVersion, into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// podLog streams a container's log (pods/log).
func (h *handler) podLog() error {
	opts := &api.PodLogOptions{}
	if err := h.decodeQuery(opts); err != nil {
		return h.fail(err)
	}
	if errs := validation.ValidatePodLogOptions(opts, false); len(errs) > 0 {
		return h.fail(apierrors.NewInvalid(api.Kind("PodLogOptions"), "log", errs))
	}
	conn, err := h.kubeletConn()
	if err != nil {
		return h.fail(err)
	}
	location, transport, err := podregistry.LogLocation(h.ctx, podGetter{h}, conn, h.info.Name, opts)
	if err != nil {
		return h.fail(err)
	}
	w := h.c.Response()
	if location == nil { // not on a node yet: no log
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	streamer := &genericrest.LocationStreamer{
		Location: location, Transport: transport, ContentType: "text/plain", Flush: opts.Follow,
		ResponseChecker: genericrest.NewGenericHttpResponseChecker(api.Resource("pods/log"), h.info.Name),
		RedirectChecker: genericrest.PreventRedirects,
	}
	body, flush, contentType, err := streamer.InputStream(h.ctx, "v1", h.c.Request().Header.Get("Accept"))
	if err != nil {
		return h.fail(err)
	}
	defer body.Close()
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	if !flush {
		_, _ = io.Copy(w, body)
		return nil
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
			w.Flush()
		}
		if err != nil {
			return nil
		}
	}
}

// podExec and podAttach connect a client's streams to a container.
func (h *handler) podExec() error {
	opts := &api.PodExecOptions{}
	if err := h.decodeQuery(opts); err != nil {
		return h.fail(err)
	}
	if len(opts.Command) == 0 {
		return h.fail(apierrors.NewBadRequest("you must specify at least 1 command"))
	}
	conn, err := h.kubeletConn()
	if err != nil {
		return h.fail(err)
	}
	location, transport, err := podregistry.ExecLocation(h.ctx, podGetter{h}, conn, h.info.Name, opts)
	if err != nil {
		return h.fail(err)
	}
	h.streamTo(location, transport, translator.Options{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY})
	return nil
}

func (h *handler) podAttach() error {
	opts := &api.PodAttachOptions{}
	if err := h.decodeQuery(opts); err != nil {
		return h.fail(err)
	}
	conn, err := h.kubeletConn()
	if err != nil {
		return h.fail(err)
	}
	location, transport, err := podregistry.AttachLocation(h.ctx, podGetter{h}, conn, h.info.Name, opts)
	if err != nil {
		return h.fail(err)
	}
	h.streamTo(location, transport, translator.Options{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY})
	return nil
}

// streamTo proxies an upgraded (SPDY) connection to location, translating
// kubectl's websocket protocol (v5.channel.k8s.io) to SPDY towards the
// kubelet, as kube-apiserver does.
func (h *handler) streamTo(location *url.URL, transport http.RoundTripper, streams translator.Options) {
	var handler http.Handler = proxy.NewUpgradeAwareHandler(location, transport, false, true, proxy.NewErrorResponder(h))
	handler = translator.NewTranslatingHandler(handler, translator.NewStreamTranslatorHandler(location, transport, 0, streams), wsstream.IsWebSocketRequestWithStreamCloseProtocol)
	handler.ServeHTTP(h.c.Response(), h.c.Request())
}

// podPortForward tunnels port-forward streams to the pod's kubelet.
func (h *handler) podPortForward() error {
	opts := &api.PodPortForwardOptions{}
	if err := h.decodeQuery(opts); err != nil {
		return h.fail(err)
	}
	conn, err := h.kubeletConn()
	if err != nil {
		return h.fail(err)
	}
	location, transport, err := podregistry.PortForwardLocation(h.ctx, podGetter{h}, conn, h.info.Name, opts)
	if err != nil {
		return h.fail(err)
	}
	var handler http.Handler = proxy.NewUpgradeAwareHandler(location, transport, false, true, proxy.NewErrorResponder(h))
	handler = translator.NewTranslatingHandler(handler, translator.NewTunnelingHandler(handler), wsstream.IsWebSocketRequestWithTunnelingProtocol)
	handler.ServeHTTP(h.c.Response(), h.c.Request())
	return nil
}

// nodeProxy proxies /api/v1/nodes/NAME/proxy/PATH to the node's kubelet.
func (h *handler) nodeProxy() error {
	conn, err := h.kubeletConn()
	if err != nil {
		return h.fail(err)
	}
	info, err := conn.GetConnectionInfo(h.ctx, types.NodeName(h.info.Name))
	if err != nil {
		return h.fail(err)
	}
	rest := "/"
	if len(h.info.Parts) > 3 {
		rest += strings.Join(h.info.Parts[3:], "/")
	}
	if strings.HasSuffix(h.c.Request().URL.Path, "/") && !strings.HasSuffix(rest, "/") {
		rest += "/"
	}
	location := &url.URL{Scheme: info.Scheme, Host: info.Hostname + ":" + info.Port, Path: rest, RawQuery: h.c.Request().URL.RawQuery}
	handler := proxy.NewUpgradeAwareHandler(location, info.Transport, true, false, proxy.NewErrorResponder(h))
	handler.ServeHTTP(h.c.Response(), h.c.Request())
	return nil
}

// Error answers a failed proxy connection (proxy.ErrorResponder).
func (h *handler) Error(err error) {
	if _, ok := err.(apierrors.APIStatus); !ok {
		err = apierrors.NewServiceUnavailable(err.Error())
	}
	_ = h.fail(err)
}
