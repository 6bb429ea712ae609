package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	// The other plugins of the Corefile register themselves.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
)

// directive is CoreDNS's kubernetes plugin over the client given to
// Start (the plugin's own directive can only reach an API server by
// URL, kubeconfig or in-cluster credentials). It takes the kubernetes
// plugin's arguments and options.
const directive = "sqlkube_kubernetes"

func init() {
	// Only the plugins the Corefile uses, in the order CoreDNS runs them.
	dnsserver.Directives = []string{"bind", "errors", "cache", directive, "forward"}
	dnsserver.Quiet = true // no banner on stdout
	plugin.Register(directive, setupKubernetes)
}

var (
	// startMu serializes Start: the directive's setup, which runs inside
	// caddy.Start, takes its client from startClient.
	startMu     sync.Mutex
	startClient *rest.Config
)

// Options configure a DNS server.
type Options struct {
	Config
	// Client reaches the API server; CoreDNS lists and watches services,
	// endpoint slices, pods and namespaces through it.
	Client *rest.Config
}

// Server is a running DNS server.
type Server struct {
	inst     *caddy.Instance
	address  string
	corefile string
}

// Start starts CoreDNS with o's Corefile. It returns once the server
// listens, after CoreDNS's view of the cluster has synced (or after the
// kubernetes plugin's startup timeout of 5 s: names then resolve as the
// objects arrive).
func Start(o Options) (*Server, error) {
	if o.Client == nil {
		return nil, errors.New("clusterdns: no API client")
	}
	c, err := o.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	corefile, err := c.Corefile()
	if err != nil {
		return nil, err
	}
	startMu.Lock()
	defer startMu.Unlock()
	startClient = o.Client
	defer func() { startClient = nil }()
	inst, err := caddy.Start(caddy.CaddyfileInput{Contents: []byte(corefile), Filepath: "Corefile", ServerTypeName: "dns"})
	if err != nil {
		if inst != nil {
			// The kubernetes plugin's informers start before the
			// servers bind: stop them.
			inst.ShutdownCallbacks()
			_ = inst.Stop()
		}
		return nil, fmt.Errorf("clusterdns: %w", err)
	}
	return &Server{inst: inst, address: c.listenAddress(), corefile: corefile}, nil
}

// Address is host:port the server answers on.
func (s *Server) Address() string { return s.address }

// Corefile is the configuration the server runs.
func (s *Server) Corefile() string { return s.corefile }

// Stop stops serving and CoreDNS's informers.
func (s *Server) Stop() {
	_ = s.inst.Stop()
	s.inst.ShutdownCallbacks()
}

// setupKubernetes sets up the directive as the kubernetes plugin's own
// setup does, with the client Start was given.
func setupKubernetes(c *caddy.Controller) error {
	if startClient == nil {
		return plugin.Error(directive, errors.New("no API client: CoreDNS was not started by clusterdns.Start"))
	}
	cfg := rest.CopyConfig(startClient)
	if !c.Next() {
		return plugin.Error(directive, c.ArgErr())
	}
	k, err := kubernetes.ParseStanza(c)
	if err != nil {
		return plugin.Error(directive, err)
	}
	if c.Next() {
		return plugin.Error(directive, plugin.ErrOnce)
	}
	k.ClientConfig = restClientConfig{cfg}
	onStart, onShut, err := k.InitKubeCache(context.Background())
	if err != nil {
		return plugin.Error(directive, err)
	}
	if onStart != nil {
		c.OnStartup(onStart)
	}
	if onShut != nil {
		c.OnShutdown(onShut)
	}
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		k.Next = next
		return k
	})
	return nil
}

// restClientConfig hands the kubernetes plugin a client configuration.
type restClientConfig struct{ cfg *rest.Config }

var _ clientcmd.ClientConfig = restClientConfig{}

func (r restClientConfig) ClientConfig() (*rest.Config, error) { return rest.CopyConfig(r.cfg), nil }
func (restClientConfig) RawConfig() (clientcmdapi.Config, error) {
	return clientcmdapi.Config{}, errors.New("clusterdns: no kubeconfig")
}
func (restClientConfig) Namespace() (string, bool, error)     { return "", false, nil }
func (restClientConfig) ConfigAccess() clientcmd.ConfigAccess { return nil }
