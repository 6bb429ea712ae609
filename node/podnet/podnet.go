// Package podnet gives a node's pods their network across the cluster,
// host-gw style: once the node's spec.podCIDR is assigned (by the node-ipam
// controller), it writes the CNI configuration (a bridge with host-local
// addresses from that CIDR) the runtime waits for, masquerades what pods
// send outside every node's pod CIDR, and keeps a route to every other
// node's pod CIDR through that node's InternalIP, as Nodes come and go.
//
// Routes go only to nodes on a network this host reaches directly (one L2
// segment or subnet, as flannel's host-gw requires); a node behind a
// router gets none and a warning. Routes and the masquerade chain stay
// when the agent stops, so pods keep talking across a restart; the next
// start removes what no longer matches a Node.
//
// A Node deleted and registered again may get another pod CIDR: the
// network follows it (a configuration, bridge and masquerade chain of
// the new CIDR) as a restart would, and the pods made before keep their
// addresses, bridge and chain until they are made anew.
package podnet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Options configure a node's pod network.
type Options struct {
	// NodeName is this node's Node.
	NodeName string
	// CNIConfDir receives the conflist; IPAMDir holds host-local's leases.
	CNIConfDir, IPAMDir string
	// OnPodCIDR, when set, is called once with the node's pod CIDR, after
	// the CNI configuration is written.
	OnPodCIDR func(podCIDR string)
	Log       zerolog.Logger
}

// ErrNoPodCIDR is what Run ends with when ctx ends before the node has a
// pod CIDR.
var ErrNoPodCIDR = errors.New("podnet: the node has no spec.podCIDR (is the node-ipam controller running with --cluster-cidr?)")

// BridgeName names a node's CNI bridge after its pod CIDR, so that several
// nodes on one host (each with its own CIDR) each have their own bridge.
func BridgeName(podCIDR string) string {
	h := fnv.New32a()
	h.Write([]byte(podCIDR))
	return fmt.Sprintf("sqlkube%08x", h.Sum32())
}

// MasqueradeChain is the nat chain that decides which of the node's pods'
// packets leave masqueraded (at most 28 characters); POSTROUTING jumps to
// it for packets from podCIDR, with the comment MasqueradeComment.
func MasqueradeChain(podCIDR string) string {
	return "SQLKUBE-MASQ-" + BridgeName(podCIDR)[len("sqlkube"):]
}

// MasqueradeComment is the comment on POSTROUTING's jump to
// MasqueradeChain.
func MasqueradeComment(podCIDR string) string {
	return "sqlkube: pods of " + podCIDR + " leave masqueraded"
}

// Run keeps the node's pod network in step with the Nodes client sees,
// until ctx ends.
func Run(ctx context.Context, client kubernetes.Interface, o Options) error {
	// Whatever Run returns for, its informers stop first: Shutdown waits
	// for them.
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	nodes := factory.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger() },
		UpdateFunc: func(old, cur any) { trigger() },
		DeleteFunc: func(any) { trigger() },
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return ctx.Err()
	}
	lister := nodes.Lister()
	a := &agent{o: o, routed: map[string]bool{}}
	podCIDR := ""
	// A failed sync is tried again on the next change or after a while.
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			if podCIDR == "" {
				return ErrNoPodCIDR
			}
			return nil
		case <-kick:
		case <-retry.C:
		}
		all, err := lister.List(labels.Everything())
		if err != nil {
			return err
		}
		self := findNode(all, o.NodeName)
		if self == nil || self.Spec.PodCIDR == "" {
			continue
		}
		if self.Spec.PodCIDR != podCIDR {
			// spec.podCIDR is immutable once set, but a Node deleted and
			// registered again gets a pod CIDR anew, maybe another: the
			// network follows it, as a restart of the agent would.
			if err := setUp(ctx, o, self.Spec.PodCIDR); err != nil {
				return err
			}
			if podCIDR == "" {
				o.Log.Info().Str("podCIDR", self.Spec.PodCIDR).Msg("pod network configured")
				if o.OnPodCIDR != nil {
					o.OnPodCIDR(self.Spec.PodCIDR)
				}
			} else {
				o.Log.Warn().Str("podCIDR", self.Spec.PodCIDR).Str("oldPodCIDR", podCIDR).
					Msg("the node's pod CIDR changed (its Node was registered again): new pods get addresses from the new one; pods made before keep theirs until they are made anew")
			}
			podCIDR = self.Spec.PodCIDR
		}
		if err := a.sync(ctx, podCIDR, all); err != nil {
			o.Log.Warn().Err(err).Msg("pod network: routes or masquerading not in step with the nodes; retrying")
			retry.Reset(5 * time.Second)
		}
	}
}

func findNode(nodes []*corev1.Node, name string) *corev1.Node {
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// setUp prepares the host for the node's pods: forwarding, bridged
// traffic through iptables (kube-proxy's Services need it for pods of one
// bridge), and the CNI configuration.
func setUp(ctx context.Context, o Options, podCIDR string) error {
	if _, _, err := net.ParseCIDR(podCIDR); err != nil {
		return fmt.Errorf("podnet: the node's pod CIDR: %w", err)
	}
	if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return fmt.Errorf("podnet: %w", err)
	}
	if err := writeSysctl("net/bridge/bridge-nf-call-iptables", "1"); err != nil {
		o.Log.Warn().Err(err).Msg("bridged pod traffic bypasses iptables (no br_netfilter): a pod may not reach a Service whose endpoint is on its own node")
	}
	// A rule of earlier versions masqueraded everything off the bridge,
	// pod-to-pod traffic across nodes too.
	_ = iptables(ctx, "-t", "nat", "-D", "POSTROUTING", "-s", podCIDR, "!", "-o", BridgeName(podCIDR), "-m", "comment", "--comment", MasqueradeComment(podCIDR), "-j", "MASQUERADE")
	return WriteCNIConfig(o.CNIConfDir, o.IPAMDir, podCIDR)
}

func writeSysctl(name, value string) error {
	p := filepath.Join("/proc/sys", name)
	if b, err := os.ReadFile(p); err == nil && string(b) == value+"\n" {
		return nil
	}
	return os.WriteFile(p, []byte(value), 0o644)
}

// agent is the state of Run's loop.
type agent struct {
	o Options
	// routed records, per node, whether it was found reachable directly
	// (true) or only through a router (false), to log each change once.
	routed map[string]bool
	// unrouted counts the nodes found reachable only through a router.
	unrouted int
	// masq is the masquerade chain last written (empty: none yet).
	masq string
}

// sync puts the routes to other nodes' pod CIDRs and the masquerade chain
// in step with nodes.
func (a *agent) sync(ctx context.Context, podCIDR string, nodes []*corev1.Node) error {
	o := a.o
	var cidrs []string
	var peers []peer
	for _, n := range nodes {
		if n.Spec.PodCIDR == "" {
			continue
		}
		cidrs = append(cidrs, n.Spec.PodCIDR)
		if n.Name == o.NodeName {
			continue
		}
		_, dst, err := net.ParseCIDR(n.Spec.PodCIDR)
		if err != nil || dst.IP.To4() == nil {
			continue
		}
		ip := internalIP(n)
		if ip == nil {
			continue
		}
		peers = append(peers, peer{node: n.Name, dst: dst, via: ip})
	}
	sort.Strings(cidrs)
	errRoutes := a.syncRoutes(peers)
	errMasq := a.syncMasquerade(ctx, podCIDR, cidrs)
	return errors.Join(errRoutes, errMasq)
}

// internalIP is the node's first IPv4 InternalIP (nil: none).
func internalIP(n *corev1.Node) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip := net.ParseIP(a.Address).To4(); ip != nil {
			return ip
		}
	}
	return nil
}
