package allocator

import (
	"context"
	"errors"
	"net"
	"strconv"

	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
	"k8s.io/kubernetes/pkg/registry/core/service/portallocator"
)

// The adapters below let Kubernetes' own service allocation logic
// (k8s.io/kubernetes/pkg/registry/core/service/storage: IP families,
// dual-stack policy, cluster IPs and node ports on create and on every
// kind of update) claim values here. Those interfaces take no context and
// no owner, so an adapter is made per request with both.

// IPAllocator is r (a cluster IP range) as Kubernetes' ipallocator for
// one request: ctx bounds its datastore calls and owner is who claims.
func (r *Reservations) IPAllocator(ctx context.Context, owner string) ipallocator.Interface {
	return ipAdapter{r: r, ctx: ctx, owner: owner}
}

// PortAllocator is r (a node port range) as Kubernetes' portallocator for
// one request.
func (r *Reservations) PortAllocator(ctx context.Context, owner string) portallocator.Interface {
	return portAdapter{r: r, ctx: ctx, owner: owner}
}

type ipAdapter struct {
	r      *Reservations
	ctx    context.Context
	owner  string
	dryRun bool
}

var _ ipallocator.Interface = ipAdapter{}

func (a ipAdapter) ipError(ip net.IP, err error) error {
	switch {
	case errors.Is(err, ErrNotInRange):
		return &ipallocator.ErrNotInRange{IP: ip, ValidRange: a.r.valid}
	case errors.Is(err, ErrAllocated):
		return ipallocator.ErrAllocated
	case errors.Is(err, ErrFull):
		return ipallocator.ErrFull
	}
	return err
}

func (a ipAdapter) Allocate(ip net.IP) error {
	_, err := a.r.allocate(a.ctx, ip.String(), a.owner, a.dryRun)
	return a.ipError(ip, err)
}

func (a ipAdapter) AllocateNext() (net.IP, error) {
	v, err := a.r.allocate(a.ctx, "", a.owner, a.dryRun)
	if err != nil {
		return nil, a.ipError(nil, err)
	}
	return net.ParseIP(v), nil
}

func (a ipAdapter) Release(ip net.IP) error {
	if a.dryRun {
		return nil
	}
	return a.r.Release(a.ctx, ip.String())
}

func (a ipAdapter) ForEach(fn func(net.IP)) {
	_ = a.r.ForEach(a.ctx, func(v string) {
		if ip := net.ParseIP(v); ip != nil {
			fn(ip)
		}
	})
}

func (a ipAdapter) CIDR() net.IPNet {
	if a.r.network == nil {
		return net.IPNet{}
	}
	return *a.r.network
}

func (a ipAdapter) IPFamily() api.IPFamily {
	if a.r.network != nil && a.r.network.IP.To4() == nil {
		return api.IPv6Protocol
	}
	return api.IPv4Protocol
}

func (a ipAdapter) Has(ip net.IP) bool {
	ok, err := a.r.Has(a.ctx, ip.String())
	return err == nil && ok
}

func (a ipAdapter) Destroy()       {}
func (a ipAdapter) EnableMetrics() {}

func (a ipAdapter) DryRun() ipallocator.Interface {
	a.dryRun = true
	return a
}

type portAdapter struct {
	r     *Reservations
	ctx   context.Context
	owner string
}

var _ portallocator.Interface = portAdapter{}

func (a portAdapter) portError(err error) error {
	switch {
	case errors.Is(err, ErrNotInRange):
		return &portallocator.ErrNotInRange{ValidPorts: a.r.valid}
	case errors.Is(err, ErrAllocated):
		return portallocator.ErrAllocated
	case errors.Is(err, ErrFull):
		return portallocator.ErrFull
	}
	return err
}

// Kubernetes' allocation runs node ports through a PortAllocationOperation,
// which does its own dry run: the adapter always claims for real.

func (a portAdapter) Allocate(port int) error {
	_, err := a.r.Allocate(a.ctx, strconv.Itoa(port), a.owner)
	return a.portError(err)
}

func (a portAdapter) AllocateNext() (int, error) {
	v, err := a.r.Allocate(a.ctx, "", a.owner)
	if err != nil {
		return 0, a.portError(err)
	}
	return strconv.Atoi(v)
}

func (a portAdapter) Release(port int) error { return a.r.Release(a.ctx, strconv.Itoa(port)) }

func (a portAdapter) ForEach(fn func(int)) {
	_ = a.r.ForEach(a.ctx, func(v string) {
		if p, err := strconv.Atoi(v); err == nil {
			fn(p)
		}
	})
}

func (a portAdapter) Has(port int) bool {
	ok, err := a.r.Has(a.ctx, strconv.Itoa(port))
	return err == nil && ok
}

func (a portAdapter) Destroy()       {}
func (a portAdapter) EnableMetrics() {}
