package fake

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
)

// Defaults of Options, as kubelets have them.
const (
	DefaultNamePrefix     = "fake-"
	DefaultLeaseDuration  = 40 * time.Second
	DefaultRenewInterval  = 10 * time.Second
	DefaultStatusInterval = 5 * time.Minute
	// DefaultNodeWorkers is as many as the pod workers: 5,000 nodes need
	// 500 renewals a second, and with 16 workers a server busy with a
	// burst of pod status writes (64 at a time) answered them too slowly:
	// some Leases went unrenewed past the node-monitor grace period, and
	// the node-lifecycle controller evicted those nodes' pods.
	DefaultNodeWorkers = 64
	DefaultPodWorkers  = 64
	// DefaultCapacity is each node's capacity (and allocatable).
	DefaultCapacity = "cpu=32,memory=256Gi,pods=110"
	// DefaultNodeIPRange holds the nodes' InternalIPs, one per node in
	// index order (10.48.0.1 is fake-0).
	DefaultNodeIPRange = "10.48.0.0/12"
	// DefaultPodCIDRRange is cut into a /24 per node (10.128.0.0/24 is
	// fake-0's), unless a node already has a spec.podCIDR.
	DefaultPodCIDRRange = "10.128.0.0/9"
)

// Annotations that end a pod's containers after a while.
const (
	// AnnotationSucceedAfter (a duration, e.g. "2s"): the containers exit 0
	// (reason Completed) that long after they started.
	AnnotationSucceedAfter = "fake.sqlkube.io/succeed-after"
	// AnnotationFailAfter: the containers exit 1 (reason Error).
	AnnotationFailAfter = "fake.sqlkube.io/fail-after"
	// JobPodRuntime is how long a Job's pod without either annotation
	// runs before it succeeds.
	JobPodRuntime = time.Second
)

// Label values every simulated node carries.
const (
	LabelType         = "type"
	LabelTypeValue    = "fake"
	InstanceTypeValue = "fake"
)

// ErrOptions is wrapped by every error of Options.Validate and the flag
// parsers.
var ErrOptions = errors.New("fake: invalid options")

// Options configure a Simulator.
type Options struct {
	// Client reaches the API server (its QPS and burst should be raised:
	// thousands of nodes renew a Lease every RenewInterval).
	Client kubernetes.Interface
	Logger zerolog.Logger
	// Count nodes are simulated, named NamePrefix0 … NamePrefix(Count-1).
	Count      int
	NamePrefix string
	// Labels and Taints are added to every node.
	Labels map[string]string
	Taints []corev1.Taint
	// Capacity is each node's capacity and allocatable (default
	// DefaultCapacity).
	Capacity corev1.ResourceList
	// PodStartDelay is how long after a bound pod is first seen it runs.
	PodStartDelay time.Duration
	// KubeletVersion is reported in nodeInfo (default: the server's
	// /version, as the API server and kubelets of a cluster match).
	KubeletVersion string
	// LeaseDuration, RenewInterval and StatusInterval are the heartbeat
	// (defaults: 40 s, 10 s, 5 min as kubelets).
	LeaseDuration  time.Duration
	RenewInterval  time.Duration
	StatusInterval time.Duration
	// NodeIPRange and PodCIDRRange are where addresses come from
	// (defaults DefaultNodeIPRange, DefaultPodCIDRRange).
	NodeIPRange  string
	PodCIDRRange string
	// NodeWorkers and PodWorkers are how many requests run at once.
	NodeWorkers int
	PodWorkers  int
}

func (o *Options) setDefaults() error {
	if o.Client == nil {
		return fmt.Errorf("%w: no client", ErrOptions)
	}
	if o.Count < 0 {
		return fmt.Errorf("%w: negative node count %d", ErrOptions, o.Count)
	}
	if o.NamePrefix == "" {
		o.NamePrefix = DefaultNamePrefix
	}
	if o.Capacity == nil {
		o.Capacity, _ = ParseCapacity(DefaultCapacity)
	}
	if o.PodStartDelay < 0 {
		return fmt.Errorf("%w: negative pod start delay", ErrOptions)
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewInterval <= 0 {
		o.RenewInterval = DefaultRenewInterval
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.NodeIPRange == "" {
		o.NodeIPRange = DefaultNodeIPRange
	}
	if o.PodCIDRRange == "" {
		o.PodCIDRRange = DefaultPodCIDRRange
	}
	if o.NodeWorkers <= 0 {
		o.NodeWorkers = DefaultNodeWorkers
	}
	if o.PodWorkers <= 0 {
		o.PodWorkers = DefaultPodWorkers
	}
	return nil
}

// ParseLabels parses k=v,k2=v2.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: label %q: want key=value", ErrOptions, kv)
		}
		out[k] = v
	}
	return out, nil
}

// ParseTaints parses key=value:Effect,key:Effect (kubelet's
// --register-with-taints).
func ParseTaints(s string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	for _, t := range splitList(s) {
		kv, effect, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("%w: taint %q: want key=value:Effect", ErrOptions, t)
		}
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("%w: taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", ErrOptions, t)
		}
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			return nil, fmt.Errorf("%w: taint %q: empty key", ErrOptions, t)
		}
		out = append(out, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return out, nil
}

// ParseCapacity parses cpu=32,memory=256Gi,pods=110; any resource name is
// taken, extended resources (example.com/gpu=2) included.
func ParseCapacity(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: capacity %q: want resource=quantity", ErrOptions, kv)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%w: capacity %q: %v", ErrOptions, kv, err)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// addressing hands out node IPs and pod CIDRs by node index.
type addressing struct {
	nodeIPs  netip.Prefix
	podCIDRs netip.Prefix
}

func newAddressing(nodeIPs, podCIDRs string, count int) (addressing, error) {
	n, err := netip.ParsePrefix(nodeIPs)
	if err != nil || !n.Addr().Is4() {
		return addressing{}, fmt.Errorf("%w: node IP range %q: want an IPv4 CIDR", ErrOptions, nodeIPs)
	}
	p, err := netip.ParsePrefix(podCIDRs)
	if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
		return addressing{}, fmt.Errorf("%w: pod CIDR range %q: want an IPv4 CIDR of /24 or wider", ErrOptions, podCIDRs)
	}
	if count >= 1<<(32-n.Bits())-2 || count > 1<<(24-p.Bits()) {
		return addressing{}, fmt.Errorf("%w: %d nodes do not fit in %s and %s", ErrOptions, count, nodeIPs, podCIDRs)
	}
	return addressing{nodeIPs: n.Masked(), podCIDRs: p.Masked()}, nil
}

// nodeIP is node i's InternalIP.
func (a addressing) nodeIP(i int) netip.Addr { return addIPv4(a.nodeIPs.Addr(), uint32(i)+1) }

// podCIDR is node i's /24.
func (a addressing) podCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(addIPv4(a.podCIDRs.Addr(), uint32(i)<<8), 24)
}

func addIPv4(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
