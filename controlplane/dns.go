package controlplane

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/sqlkube/sqlkube/clusterdns"
	"github.com/sqlkube/sqlkube/node/fake"
)

// DNSConfig configures the cluster DNS each API server runs (CoreDNS,
// behind the kube-dns Service). The fields are `sqlkube server`'s
// --disable-dns and --cluster-dns* flags.
type DNSConfig struct {
	Disable bool
	// IP is the kube-dns Service's cluster IP ("": the tenth address of
	// the service range, as kubeadm's).
	IP string
	// Address is where this server answers DNS ("": the advertised
	// address, or the host's when that is a loopback one).
	Address   string
	Domain    string
	Port      int
	Upstreams []string
	// AwaitNode: serve only once the cluster has a Node that is not
	// simulated (a host's tenants: names matter to pods on real nodes,
	// and an idle tenant with none keeps no DNS, its informers and its
	// Lease renewals).
	AwaitNode bool
}

// serviceIP is --cluster-dns, or the tenth address of the service range.
func (f *DNSConfig) serviceIP(serviceRange string) (net.IP, error) {
	if f.IP == "" {
		return clusterdns.ServiceIP(serviceRange)
	}
	ip := net.ParseIP(f.IP)
	if ip == nil {
		return nil, fmt.Errorf("--cluster-dns %q is not an IP", f.IP)
	}
	return ip, nil
}

// kubeletDNS is what this host's node gives pods as their nameserver:
// the kube-dns Service, when this server keeps it or --cluster-dns names
// one the user runs.
func (f *DNSConfig) kubeletDNS(serviceIP net.IP) []string {
	if f.Disable && f.IP == "" {
		return nil
	}
	return []string{serviceIP.String()}
}

// listenAddress is --cluster-dns-address, else the advertised address
// unless it is a loopback one (Kubernetes refuses those as endpoints, and
// kube-proxy could not send pods there), else the host's address (that
// of the default route's interface, as this host's node's).
func (f *DNSConfig) listenAddress(advertise net.IP) (net.IP, error) {
	if f.Address != "" {
		ip := net.ParseIP(f.Address)
		if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
			return nil, fmt.Errorf("--cluster-dns-address %q: want an IP that is neither loopback nor unspecified", f.Address)
		}
		return ip, nil
	}
	if !advertise.IsLoopback() {
		return advertise, nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return nil, fmt.Errorf("the advertised address %s is a loopback one and the host has no other: give --cluster-dns-address (%w)", advertise, err)
	}
	return ip, nil
}

// awaitRealNode returns once the cluster has a Node that is not one of
// the simulated ones (node/fake's label), watching the Nodes through
// the API's watch cache: no periodic reads of the datastore.
func awaitRealNode(ctx context.Context, cs kubernetes.Interface) error {
	isReal := func(o any) bool {
		n, ok := o.(*corev1.Node)
		return ok && n.Labels[fake.LabelType] != fake.LabelTypeValue
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll, fields.Everything())
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, func(store cache.Store) (bool, error) {
		return slices.ContainsFunc(store.List(), isReal), nil
	}, func(ev watch.Event) (bool, error) {
		return (ev.Type == watch.Added || ev.Type == watch.Modified) && isReal(ev.Object), nil
	})
	return err
}

// runClusterDNS serves DNS at its listenAddress (CoreDNS reading the cluster over
// loopback as the coredns service account) and keeps this server among
// the kube-dns Service's endpoints, until ctx ends. A server that cannot
// listen (the port is taken) logs why and serves no DNS.
func runClusterDNS(ctx context.Context, f DNSConfig, serviceIP, advertise net.IP, loopback *rest.Config, log zerolog.Logger) {
	address, err := f.listenAddress(advertise)
	if err != nil {
		log.Warn().Err(err).Msg("this server serves no cluster DNS")
		return
	}
	cs, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		log.Error().Err(err).Msg("no cluster DNS")
		return
	}
	if f.AwaitNode {
		if err := awaitRealNode(ctx, cs); err != nil {
			if ctx.Err() == nil {
				log.Error().Err(err).Msg("no cluster DNS: waiting for a node")
			}
			return
		}
	}
	// kube-system and RBAC come from the server's bootstrap; retry until
	// they are there, and until the authorizer has seen CoreDNS's
	// binding.
	var lastErr error
	made := false
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !made {
			if lastErr = clusterdns.EnsureRBAC(ctx, cs); lastErr != nil {
				return false, nil
			}
			made = true
		}
		ok, err := clusterdns.Authorized(ctx, clusterdns.ClientConfig(loopback))
		lastErr = err
		return ok, nil
	})
	if err != nil {
		if lastErr != nil {
			log.Error().Err(lastErr).Msg("no cluster DNS: its service account and role")
		}
		return
	}
	srv, err := clusterdns.Start(clusterdns.Options{
		Config: clusterdns.Config{Address: address, Port: f.Port, Domain: f.Domain, Upstreams: f.Upstreams},
		Client: clusterdns.ClientConfig(loopback),
	})
	if err != nil {
		log.Warn().Err(err).Msg("this server serves no cluster DNS (--disable-dns silences this, --cluster-dns-port picks another port)")
		return
	}
	defer srv.Stop()
	log.Info().Str("address", srv.Address()).Str("service", serviceIP.String()).Str("domain", f.Domain).Msg("serving cluster DNS")
	clusterdns.RunService(ctx, cs, clusterdns.ServiceOptions{ClusterIP: serviceIP, Address: address, Port: f.Port}, log)
}
