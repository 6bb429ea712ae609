package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/controllers/manager"
	"github.com/sqlkube/sqlkube/internal/endpoint"
	"github.com/sqlkube/sqlkube/scheduler"
)

// componentEndpoint is an in-process component's own HTTPS endpoint:
// kube-controller-manager's on 10257, kube-scheduler's on 10259.
type componentEndpoint struct {
	name string // kube-controller-manager, kube-scheduler
	addr endpoint.Address
	own  func(family string) bool
	l    net.Listener
	// resources: the scheduler's /metrics/resources.
	resources *scheduler.ResourceMetrics
}

// componentEndpoints are the endpoints Components serve (none unless
// Endpoints is set): each component's --secure-port and --bind-address,
// listened on at once so that a port in use fails the start.
func (f *Components) componentEndpoints() ([]*componentEndpoint, error) {
	if f == nil || !f.Endpoints {
		return nil, nil
	}
	var eps []*componentEndpoint
	if !f.controllersDisabled() {
		o, err := manager.NewOptions()
		if err != nil {
			return nil, err
		}
		if err := o.Parse(f.ControllerArgs); err != nil {
			return nil, err
		}
		if a := o.Endpoint(); a.Enabled() {
			eps = append(eps, &componentEndpoint{name: "kube-controller-manager", addr: a, own: apiserver.ControllerManagerOwns})
		}
	}
	if !f.DisableScheduler {
		o := scheduler.NewOptions()
		if err := o.Parse(f.SchedulerArgs); err != nil {
			return nil, err
		}
		if a := o.Endpoint(); a.Enabled() {
			eps = append(eps, &componentEndpoint{name: "kube-scheduler", addr: a, own: apiserver.SchedulerOwns,
				resources: &scheduler.ResourceMetrics{}})
		}
	}
	for i, ep := range eps {
		flag := "kube-controller-manager-arg"
		if ep.name == "kube-scheduler" {
			flag = "kube-scheduler-arg"
		}
		l, err := net.Listen("tcp", ep.addr.String())
		if err != nil {
			for _, open := range eps[:i] {
				open.l.Close()
			}
			return nil, fmt.Errorf("%s's endpoint: %w (--%s=--secure-port=N moves it, 0 serves none)", ep.name, err, flag)
		}
		ep.l = l
	}
	return eps, nil
}

// apiFamilies are the metric families the API server's /metrics serves
// beside eps: its own, and those of an in-process component that serves
// no endpoint of its own (so that every family is served somewhere, and
// once).
func apiFamilies(comps *Components, eps []*componentEndpoint) func(string) bool {
	if comps == nil {
		return nil // the API server's own
	}
	return func(family string) bool {
		if apiserver.APIServerOwns(family) {
			return true
		}
		for _, ep := range eps {
			if ep.own(family) {
				return false
			}
		}
		return true
	}
}

// apiClientHosts chooses the rest_client_* series the API server's
// /metrics serves beside eps: all but those of the in-process components
// whose endpoints serve them (their clients' hosts, RESTClientHost).
func apiClientHosts(eps []*componentEndpoint) func(string) bool {
	if len(eps) == 0 {
		return nil
	}
	claimed := map[string]bool{}
	for _, ep := range eps {
		claimed[apiserver.RESTClientHost(ep.name)] = true
	}
	return func(host string) bool { return !claimed[host] }
}

// serve serves ep until ctx ends: /metrics (its families; and the
// scheduler's /metrics/resources), /healthz,
// /livez and /readyz, guarded by api as upstream guards them, over TLS
// with the operator's certificate or one the cluster CA signs for hosts,
// asking callers for client certificates of clientCAs.
func (ep *componentEndpoint) serve(ctx context.Context, api *apiserver.Server, files pki.Files, hosts []string, clientCAs *x509.CertPool, log zerolog.Logger) error {
	certFile, keyFile := ep.addr.CertFile, ep.addr.KeyFile
	if certFile == "" || keyFile == "" {
		var err error
		if certFile, keyFile, err = pki.EnsureComponentServing(files.Dir, ep.name, hosts); err != nil {
			ep.l.Close()
			return fmt.Errorf("%s's endpoint: %w", ep.name, err)
		}
	}
	cert, err := newReloadingCert(certFile, keyFile)
	if err != nil {
		ep.l.Close()
		return fmt.Errorf("%s's endpoint: %w", ep.name, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", apiserver.ComponentMetricsHandler(ep.own, apiserver.RESTClientHost(ep.name)))
	if ep.resources != nil {
		mux.Handle("/metrics/resources", ep.resources)
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	}
	tlsConfig := &tls.Config{
		GetCertificate: cert.GetCertificate, ClientCAs: clientCAs,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
	}
	log.Info().Str("component", ep.name).Str("listen", ep.l.Addr().String()).Msg("serving the component's endpoint (/metrics, /healthz)")
	return endpoint.Serve(ctx, ep.l, api.ComponentHandler(mux), tlsConfig)
}
