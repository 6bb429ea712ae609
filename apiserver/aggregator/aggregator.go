package aggregator

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/admission"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	apiproxy "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	compbasemetrics "k8s.io/component-base/metrics"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationhelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	aggregatorinformers "k8s.io/kube-aggregator/pkg/client/informers/externalversions"
	apiregistrationlisters "k8s.io/kube-aggregator/pkg/client/listers/apiregistration/v1"
	localavailability "k8s.io/kube-aggregator/pkg/controllers/status/local"
	availabilitymetrics "k8s.io/kube-aggregator/pkg/controllers/status/metrics"
	remoteavailability "k8s.io/kube-aggregator/pkg/controllers/status/remote"
)

// API aggregation, as kube-aggregator does it. An APIService with
// spec.service takes over /apis/GROUP/VERSION: requests there, once
// authenticated, authorized, audited and counted here, are proxied to one
// of the service's ready EndpointSlice endpoints (sqlkube routes no
// cluster IPs, as kube-apiserver with --enable-aggregator-routing) over
// TLS checked against spec.caBundle (or not checked, with
// spec.insecureSkipTLSVerify), presenting the front-proxy client
// certificate and naming the caller in X-Remote-User, X-Remote-Group and
// X-Remote-Extra-* headers (the caller's own credentials and
// Impersonate-* headers are not passed on). Upgrades and watches stream
// through. An APIService that is not Available answers 503.
//
// kube-aggregator's own availability controllers (as libraries) keep
// status.conditions Available: Local for APIServices without a service;
// ServiceNotFound, ServicePortError, MissingEndpoints,
// FailedDiscoveryCheck... or Passed for the others, probing the backend's
// /apis/GROUP/VERSION.

// aggregatorTimeout bounds a proxied request that is not long-running
// (kube-apiserver's default --request-timeout); watches and upgrades are
// bounded only by their headers' arrival.
const aggregatorTimeout = 60 * time.Second

// aggregatorIdentity is who the server itself is to aggregated servers
// (discovery and OpenAPI fetches), as kube-aggregator's probes.
var aggregatorIdentity = &user.DefaultInfo{Name: "system:kube-aggregator", Groups: []string{user.SystemPrivilegedGroup}}

// Aggregator proxies aggregated group-versions and serves their discovery.
type Aggregator struct {
	lister apiregistrationlisters.APIServiceLister
	// Services resolves services to endpoints (conversion webhooks use
	// it too).
	Services admission.EndpointResolver
	// proxyCert is the front-proxy client certificate (nil: none).
	proxyCert *dynamiccertificates.DynamicCertKeyPairContent
	// mu guards transports and discovery.
	mu         sync.Mutex
	transports map[string]backendTransport
	discovery  map[string]backendDiscovery
}

// backendTransport is the transport to one APIService's backend, made
// for one version of the APIService and of the proxy certificate (key).
type backendTransport struct {
	key string
	rt  http.RoundTripper
	err error
}

// Options are what the aggregator is built over.
type Options struct {
	// Loopback reaches the API server in memory; Informers are its shared
	// informers (services and endpoint slices are requested here).
	Loopback  *rest.Config
	Informers informers.SharedInformerFactory
	// ProxyClientCertFile and ProxyClientKeyFile are the client
	// certificate presented to aggregated servers (empty: none).
	ProxyClientCertFile, ProxyClientKeyFile string
	// Metrics, if set, is where the availability of the APIServices is
	// registered (aggregator_unavailable_apiservice, _total): the API
	// server's own registry, so that each of a process's API servers
	// reports its own APIServices.
	Metrics compbasemetrics.KubeRegistry
}

// Start builds the aggregator and starts its informers and
// kube-aggregator's availability controllers; they stop when stop is
// closed, and shutdown waits for the informers. ready reports whether
// the APIServices have been listed. Call it before the core informer
// factory starts (it asks for the services' and endpoint slices'
// informers).
func Start(opts Options, stop <-chan struct{}) (a *Aggregator, ready func() bool, shutdown func(), err error) {
	client, err := aggregatorclient.NewForConfig(opts.Loopback)
	if err != nil {
		return nil, nil, nil, err
	}
	services, err := admission.NewEndpointResolver(opts.Informers)
	if err != nil {
		return nil, nil, nil, err
	}
	a = &Aggregator{Services: services, transports: map[string]backendTransport{}, discovery: map[string]backendDiscovery{}}
	var certKey func() ([]byte, []byte)
	if opts.ProxyClientCertFile != "" || opts.ProxyClientKeyFile != "" {
		if a.proxyCert, err = dynamiccertificates.NewDynamicServingContentFromFiles("aggregator-proxy-cert", opts.ProxyClientCertFile, opts.ProxyClientKeyFile); err != nil {
			return nil, nil, nil, fmt.Errorf("apiserver: proxy client certificate: %w", err)
		}
		certKey = a.proxyCert.CurrentCertKeyContent
	}
	factory := aggregatorinformers.NewSharedInformerFactory(client, 0)
	apiServices := factory.Apiregistration().V1().APIServices()
	a.lister = apiServices.Lister()
	metrics := availabilitymetrics.New()
	if opts.Metrics != nil {
		if err := metrics.Register(opts.Metrics.Register, opts.Metrics.CustomRegister); err != nil {
			return nil, nil, nil, fmt.Errorf("apiserver: aggregator metrics: %w", err)
		}
	}
	local, err := localavailability.New(apiServices, client.ApiregistrationV1(), metrics)
	if err != nil {
		return nil, nil, nil, err
	}
	remote, err := remoteavailability.New(apiServices, opts.Informers.Core().V1().Services(), opts.Informers.Discovery().V1().EndpointSlices(),
		client.ApiregistrationV1(), nil, certKey, services, metrics)
	if err != nil {
		return nil, nil, nil, err
	}
	synced := apiServices.Informer().HasSynced
	factory.Start(stop)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	if a.proxyCert != nil {
		go reloadEvery(ctx, a.proxyCert, reloadPeriod)
	}
	go local.Run(1, stop)
	go remote.Run(2, stop)
	return a, synced, factory.Shutdown, nil
}

// RemoteAPIService is the APIService with spec.service that serves
// /apis/GROUP/VERSION/... (path), if any.
func (a *Aggregator) RemoteAPIService(path string) (*apiregistrationv1.APIService, bool) {
	if a == nil {
		return nil, false
	}
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return nil, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return nil, false
	}
	svc, err := a.lister.Get(parts[1] + "." + parts[0])
	if err != nil || svc.Spec.Service == nil {
		return nil, false
	}
	return svc, true
}

// Serve proxies the request to svc's backend as the request's user.
func (a *Aggregator) Serve(c echo.Context, svc *apiregistrationv1.APIService) error {
	req := c.Request()
	if !apiregistrationhelper.IsAPIServiceConditionTrue(svc, apiregistrationv1.Available) {
		return responses.Status(c, apierrors.NewServiceUnavailable(fmt.Sprintf("the server is currently unable to handle the request (APIService %s is not available)", svc.Name)))
	}
	u, ok := request.UserFrom(req.Context())
	if !ok {
		return responses.Status(c, apierrors.NewInternalError(errors.New("no user in the request")))
	}
	info, _ := request.RequestInfoFrom(req.Context())
	longRunning := httpstream.IsUpgradeRequest(req) || (info != nil && (info.Verb == "watch" || filters.LongRunningSubresources.Has(info.Subresource)))
	return a.proxy(c, svc, req.URL.Path, u, longRunning)
}

// proxy sends the request to path on svc's backend, acting as u.
func (a *Aggregator) proxy(c echo.Context, svc *apiregistrationv1.APIService, path string, u user.Info, longRunning bool) error {
	req := c.Request()
	rt, err := a.transport(svc)
	if err != nil {
		return responses.Status(c, apierrors.NewInternalError(fmt.Errorf("APIService %s: %w", svc.Name, err)))
	}
	location, err := a.resolve(svc)
	if err != nil {
		return responses.Status(c, apierrors.NewServiceUnavailable(fmt.Sprintf("APIService %s: %v", svc.Name, err)))
	}
	location.Path, location.RawQuery = path, req.URL.Query().Encode()
	out, cancel := apiproxy.NewRequestForProxy(location, req)
	defer cancel()
	if !longRunning {
		ctx, cancelTimeout := context.WithTimeout(out.Context(), aggregatorTimeout)
		defer cancelTimeout()
		out = out.WithContext(ctx)
	}
	// The backend learns who the caller is from the front proxy's
	// headers only.
	out.Header.Del("Authorization")
	for name := range out.Header {
		if strings.HasPrefix(name, authenticationv1.ImpersonateUserExtraHeaderPrefix) || strings.HasPrefix(name, "Impersonate-") {
			out.Header.Del(name)
		}
	}
	uid := ""
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.RemoteRequestHeaderUID) {
		uid = u.GetUID()
	}
	upgrade := httpstream.IsUpgradeRequest(req)
	if upgrade {
		// Upgrades dial directly, past the round tripper.
		transport.SetAuthProxyHeaders(out, u.GetName(), uid, u.GetGroups(), u.GetExtra())
	}
	rt = headerTimeout{rt: transport.NewAuthProxyRoundTripper(u.GetName(), uid, u.GetGroups(), u.GetExtra(), rt), d: aggregatorTimeout}
	h := utilproxy.NewUpgradeAwareHandler(location, rt, true, upgrade, proxyResponder{c: c})
	h.ServeHTTP(c.Response(), out)
	return nil
}

// resolve finds a ready endpoint of svc's service.
func (a *Aggregator) resolve(svc *apiregistrationv1.APIService) (*url.URL, error) {
	ref := svc.Spec.Service
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	return a.Services.ResolveEndpoint(ref.Namespace, ref.Name, port)
}

// transport is the TLS transport to svc's backend: its caBundle (or no
// verification), the service's DNS name as server name, the front-proxy
// client certificate. It is rebuilt when the APIService or the
// certificate changes.
func (a *Aggregator) transport(svc *apiregistrationv1.APIService) (http.RoundTripper, error) {
	var certPEM, keyPEM []byte
	if a.proxyCert != nil {
		certPEM, keyPEM = a.proxyCert.CurrentCertKeyContent()
	}
	sum := sha256.Sum256(append(append([]byte{}, certPEM...), keyPEM...))
	key := fmt.Sprintf("%s/%s/%x", svc.UID, svc.ResourceVersion, sum[:8])
	a.mu.Lock()
	cur, ok := a.transports[svc.Name]
	a.mu.Unlock()
	if ok && cur.key == key {
		return cur.rt, cur.err
	}
	cfg := &transport.Config{TLS: transport.TLSConfig{
		Insecure:   svc.Spec.InsecureSkipTLSVerify,
		ServerName: svc.Spec.Service.Name + "." + svc.Spec.Service.Namespace + ".svc",
		CAData:     svc.Spec.CABundle,
		CertData:   certPEM, KeyData: keyPEM,
	}}
	rt, err := transport.New(cfg)
	a.mu.Lock()
	a.transports[svc.Name] = backendTransport{key: key, rt: rt, err: err}
	a.mu.Unlock()
	return rt, err
}

// proxyResponder writes the proxy's failures (the backend could not be
// reached) as 503 Statuses.
type proxyResponder struct{ c echo.Context }

func (r proxyResponder) Error(_ http.ResponseWriter, _ *http.Request, err error) {
	_ = responses.Status(r.c, apierrors.NewServiceUnavailable(err.Error()))
}

// headerTimeout fails a round trip whose response headers do not arrive
// within d; the body, once they did, is not bounded (watches).
type headerTimeout struct {
	rt http.RoundTripper
	d  time.Duration
}

func (h headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(h.d, cancel)
	resp, err := h.rt.RoundTrip(req.WithContext(ctx))
	fired := !timer.Stop()
	if err != nil {
		cancel()
		if fired {
			return nil, fmt.Errorf("no response within %v: %w", h.d, err)
		}
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// WrappedRoundTripper lets the upgrade path find the TLS configuration.
func (h headerTimeout) WrappedRoundTripper() http.RoundTripper { return h.rt }

// cancelOnClose ends a round trip's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
