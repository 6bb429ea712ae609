package allocator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// KubernetesServiceOwner is the default/kubernetes service, the only one
// that may claim the first cluster IP.
const KubernetesServiceOwner = "default/kubernetes"

// FirstServiceIP is the address after the network's: the kubernetes
// service's cluster IP.
func FirstServiceIP(network *net.IPNet) net.IP {
	n := new(big.Int).Add(new(big.Int).SetBytes(network.IP.To4()), big.NewInt(1)).Bytes()
	out := make(net.IP, 4)
	copy(out[4-len(n):], n)
	return out
}

// Errors of Allocate, checked with errors.Is.
var (
	ErrNotInRange = errors.New("allocator: not in the range")
	ErrAllocated  = errors.New("allocator: already allocated")
	ErrFull       = errors.New("allocator: the range is full")
)

// Reservations hands out unique values (service cluster IPs, node ports)
// by creating one etcd key per value in a transaction that succeeds only
// if the key does not exist, so API servers sharing a database never hand
// out the same value twice. Releasing deletes the key.
type Reservations struct {
	client *clientv3.Client
	prefix string
	size   int64
	value  func(i int64) string // the i-th value of the range
	index  func(v string) (int64, bool)
	// valid describes the range for error messages ("10.96.0.0/12").
	valid string
	// network is the cluster IP range (nil for node ports).
	network *net.IPNet
	// reservedFor are values only their owner may claim (the first
	// cluster IP is the kubernetes service's); random allocation skips
	// them.
	reservedFor map[string]string
}

// Key is the etcd key that reserves v.
func (r *Reservations) Key(v string) string { return r.prefix + v }

// reserve claims v for owner; false if it is taken.
func (r *Reservations) reserve(ctx context.Context, v, owner string) (bool, error) {
	resp, err := r.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(r.Key(v)), "=", 0)).
		Then(clientv3.OpPut(r.Key(v), owner)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Allocate claims the requested value (which must be in the range and
// free) or, if none is requested, a free one. Errors wrap ErrNotInRange,
// ErrAllocated or ErrFull.
func (r *Reservations) Allocate(ctx context.Context, requested, owner string) (string, error) {
	return r.allocate(ctx, requested, owner, false)
}

// allocate is Allocate; with dryRun it only checks, or picks a value that
// is free now, and claims nothing.
func (r *Reservations) allocate(ctx context.Context, requested, owner string, dryRun bool) (string, error) {
	if requested != "" {
		if _, ok := r.index(requested); !ok {
			return "", fmt.Errorf("%s: %w", requested, ErrNotInRange)
		}
		if o, ok := r.reservedFor[requested]; ok && o != owner {
			return "", fmt.Errorf("%s: %w", requested, ErrAllocated)
		}
		if dryRun {
			taken, err := r.Has(ctx, requested)
			if err != nil {
				return "", err
			}
			if taken {
				return "", fmt.Errorf("%s: %w", requested, ErrAllocated)
			}
			return requested, nil
		}
		ok, err := r.reserve(ctx, requested, owner)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("%s: %w", requested, ErrAllocated)
		}
		return requested, nil
	}
	taken := map[string]bool{}
	if err := r.ForEach(ctx, func(v string) { taken[v] = true }); err != nil {
		return "", err
	}
	// Above the static band first, from a random place; the band only
	// when the rest is taken.
	band := r.staticBand()
	for _, span := range [][2]int64{{band, r.size}, {0, band}} {
		lo, n := span[0], span[1]-span[0]
		if n <= 0 {
			continue
		}
		start := rand.Int64N(n)
		for i := range n {
			v := r.value(lo + (start+i)%n)
			if _, reserved := r.reservedFor[v]; taken[v] || reserved {
				continue
			}
			if dryRun {
				return v, nil
			}
			ok, err := r.reserve(ctx, v, owner)
			if err != nil {
				return "", err
			}
			if ok {
				return v, nil
			}
		}
	}
	return "", ErrFull
}

// Has reports whether v is claimed.
func (r *Reservations) Has(ctx context.Context, v string) (bool, error) {
	resp, err := r.client.Get(ctx, r.Key(v), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return resp.Count > 0, nil
}

// ForEach calls fn with every claimed value.
func (r *Reservations) ForEach(ctx context.Context, fn func(v string)) error {
	resp, err := r.client.Get(ctx, r.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		fn(string(kv.Key[len(r.prefix):]))
	}
	return nil
}

// staticBand is how many values at the start of the range random
// allocation leaves for those asked for by number (the DNS service's
// tenth address, a chosen node port) until the rest is taken:
// min(max(16, size/16), 256), as kube-apiserver's allocators; none in a
// range of 16 or fewer.
func (r *Reservations) staticBand() int64 {
	band := min(max(16, r.size/16), 256)
	if band >= r.size {
		return 0
	}
	return band
}

// Release frees v (deletes its key).
func (r *Reservations) Release(ctx context.Context, v string) error {
	_, err := r.client.Delete(ctx, r.Key(v))
	return err
}

// NewClusterIPs reserves addresses of cidr, except its network and
// broadcast addresses (IPv4).
func NewClusterIPs(client *clientv3.Client, cidr string) (*Reservations, error) {
	ip, network, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		return nil, fmt.Errorf("invalid IPv4 service cluster IP range %q", cidr)
	}
	ones, bits := network.Mask.Size()
	size := int64(1)<<(bits-ones) - 2
	if size < 1 {
		return nil, fmt.Errorf("service cluster IP range %q is too small", cidr)
	}
	base := new(big.Int).SetBytes(network.IP.To4())
	first := FirstServiceIP(network)
	return &Reservations{
		reservedFor: map[string]string{first.String(): KubernetesServiceOwner},
		client:      client, prefix: "/registry/sqlkube/serviceips/", size: size, valid: network.String(), network: network,
		value: func(i int64) string {
			n := new(big.Int).Add(base, big.NewInt(i+1)).Bytes()
			out := make(net.IP, 4)
			copy(out[4-len(n):], n)
			return out.String()
		},
		index: func(v string) (int64, bool) {
			p := net.ParseIP(v).To4()
			if p == nil || !network.Contains(p) {
				return 0, false
			}
			i := new(big.Int).Sub(new(big.Int).SetBytes(p), base).Int64() - 1
			return i, i >= 0 && i < size
		},
	}, nil
}

// NewNodePorts reserves ports of "low-high".
func NewNodePorts(client *clientv3.Client, portRange string) (*Reservations, error) {
	var low, high int64
	if _, err := fmt.Sscanf(portRange, "%d-%d", &low, &high); err != nil || low < 1 || high > 65535 || low > high {
		return nil, fmt.Errorf("invalid service node port range %q", portRange)
	}
	return &Reservations{
		client: client, prefix: "/registry/sqlkube/nodeports/", size: high - low + 1, valid: fmt.Sprintf("%d-%d", low, high),
		value: func(i int64) string { return strconv.FormatInt(low+i, 10) },
		index: func(v string) (int64, bool) {
			p, err := strconv.ParseInt(v, 10, 64)
			return p - low, err == nil && p >= low && p <= high
		},
	}, nil
}
