package subresources

import (
	"fmt"
	"io"
	"net/http"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	genericrest "k8s.io/apiserver/pkg/registry/generic/rest"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/kubelet/client"
	podregistry "k8s.io/kubernetes/pkg/registry/core/pod"
	podrest "k8s.io/kubernetes/pkg/registry/core/pod/rest"
)

// The subresources that reach a pod's kubelet (logs, exec, attach,
// port-forward), as kube-apiserver serves them: exec, attach and
// port-forward are admitted as a CONNECT with their options, the
// location comes from Kubernetes' pod registry, the connection from its
// kubelet client (the API server's kubelet-client certificate; the
// kubelet's serving certificate verified against Config.KubeletCAFile),
// and the streams from its upgrade-aware proxy, with the websocket
// translations kubectl 1.30+ asks for.

// decodeQuery decodes the request's query into an internal options type.
func decodeQuery(h *handlers.Request, into runtime.Object) error {
	if err := legacyscheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), corev1.SchemeGroupVersion, into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// decodeConnect decodes a connect request's options into into (internal)
// and admits the connection with them as served (v1, made in served).
func decodeConnect(h *handlers.Request, into, served runtime.Object) error {
	if err := decodeQuery(h, into); err != nil {
		return err
	}
	if err := legacyscheme.Scheme.Convert(into, served, nil); err != nil {
		return apierrors.NewInternalError(err)
	}
	return admitConnect(h, served)
}

// podLog streams a container's log (pods/log), over a websocket to a
// client that asks for one.
func podLog(h *handlers.Request) error {
	opts := &api.PodLogOptions{}
	if err := decodeQuery(h, opts); err != nil {
		return h.Fail(err)
	}
	if errs := validation.ValidatePodLogOptions(opts, false); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(api.Kind("PodLogOptions"), "log", errs))
	}
	conn, err := h.API.Kubelets()
	if err != nil {
		return h.Fail(err)
	}
	location, transport, err := podregistry.LogLocation(h.Ctx, coreGetter{h: h, resource: "pods"}, conn, h.Info.Name, opts)
	if err != nil {
		return h.Fail(err)
	}
	w := h.Echo.Response()
	if location == nil { // not on a node yet: no log
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	streamer := &genericrest.LocationStreamer{
		Location: location, Transport: transport, ContentType: "text/plain", Flush: opts.Follow,
		ResponseChecker: genericrest.NewGenericHttpResponseChecker(api.Resource("pods/log"), h.Info.Name),
		RedirectChecker: genericrest.PreventRedirects,
	}
	body, flush, contentType, err := streamer.InputStream(h.Ctx, "v1", h.Echo.Request().Header.Get("Accept"))
	if err != nil {
		return h.Fail(err)
	}
	defer body.Close()
	if wsstream.IsWebSocketRequest(h.Echo.Request()) {
		// A websocket client (Kubernetes' e2e framework) gets the log
		// as kube-apiserver sends it: what each read returns is one
		// message, binary (binary.k8s.io, or no subprotocol) or base64
		// text (base64.binary.k8s.io); the socket closes at the end.
		// (errorApart: the last bytes are sent too.)
		_ = wsstream.NewReader(&errorApart{r: body}, true, wsstream.NewDefaultReaderProtocols()).Copy(w, h.Echo.Request())
		return nil
	}
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

// podExec, podAttach and podPortForward connect a client's streams to a
// container through Kubernetes' own connecters (pkg/registry/core/pod/rest):
// they check the create verb on a websocket upgrade (a GET), find the
// kubelet, and either proxy the upgrade to a kubelet that declares
// websocket support or translate kubectl's websocket protocols
// (v5.channel.k8s.io, port-forward tunnelling) to SPDY towards it, as
// kube-apiserver does.
func podExec(h *handlers.Request) error {
	opts := &api.PodExecOptions{}
	if err := decodeConnect(h, opts, &corev1.PodExecOptions{}); err != nil {
		return h.Fail(err)
	}
	if len(opts.Command) == 0 {
		return h.Fail(apierrors.NewBadRequest("you must specify at least 1 command"))
	}
	return connect(h, opts, func(conn client.ConnectionInfoGetter) rest.Connecter {
		return &podrest.ExecREST{Store: coreGetter{h: h, resource: "pods"}, KubeletConn: conn, Authorizer: h.API.Authz}
	})
}

func podAttach(h *handlers.Request) error {
	opts := &api.PodAttachOptions{}
	if err := decodeConnect(h, opts, &corev1.PodAttachOptions{}); err != nil {
		return h.Fail(err)
	}
	return connect(h, opts, func(conn client.ConnectionInfoGetter) rest.Connecter {
		return &podrest.AttachREST{Store: coreGetter{h: h, resource: "pods"}, KubeletConn: conn, Authorizer: h.API.Authz}
	})
}

func podPortForward(h *handlers.Request) error {
	opts := &api.PodPortForwardOptions{}
	if err := decodeConnect(h, opts, &corev1.PodPortForwardOptions{}); err != nil {
		return h.Fail(err)
	}
	return connect(h, opts, func(conn client.ConnectionInfoGetter) rest.Connecter {
		return &podrest.PortForwardREST{Store: coreGetter{h: h, resource: "pods"}, KubeletConn: conn, Authorizer: h.API.Authz}
	})
}

// connect serves one connect request with the connecter made over the
// server's kubelet client.
func connect(h *handlers.Request, opts runtime.Object, connecter func(client.ConnectionInfoGetter) rest.Connecter) error {
	conn, err := h.API.Kubelets()
	if err != nil {
		return h.Fail(err)
	}
	handler, err := connecter(conn).Connect(h.Ctx, h.Info.Name, opts, proxyErrors{h})
	if err != nil {
		return h.Fail(err)
	}
	handler.ServeHTTP(h.Echo.Response(), h.Echo.Request())
	return nil
}

// proxyErrors answers a failed proxy connection (proxy.ErrorResponder).
type proxyErrors struct{ h *handlers.Request }

// Object completes rest.Responder. Kubernetes' connecters answer only
// through Error (proxy.NewErrorResponder); a Status is answered as one,
// anything else was not expected here.
func (p proxyErrors) Object(code int, obj runtime.Object) {
	if st, ok := obj.(*metav1.Status); ok {
		_ = p.h.Fail(&apierrors.StatusError{ErrStatus: *st})
		return
	}
	_ = p.h.Fail(apierrors.NewInternalError(fmt.Errorf("connect answered %d with a %T", code, obj)))
}

func (p proxyErrors) Error(err error) {
	if _, ok := err.(apierrors.APIStatus); !ok {
		err = apierrors.NewServiceUnavailable(err.Error())
	}
	_ = p.h.Fail(err)
}

// errorApart is a reader that never returns an error with data: the
// error comes on the next read. wsstream's copy drops the bytes of a
// read that also ends the stream, as the last read of a chunked body
// often does.
type errorApart struct {
	r   io.Reader
	err error
}

func (e *errorApart) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.r.Read(p)
	if n > 0 && err != nil {
		e.err, err = err, nil
	}
	return n, err
}
