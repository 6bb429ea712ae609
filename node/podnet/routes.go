package podnet

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes podnet installs (the rtnetlink protocol
// field, `proto 113` in `ip route`), so that it only ever removes its own.
const RouteProtocol netlink.RouteProtocol = 113

// peer is another node's pod CIDR and the address that reaches it.
type peer struct {
	node string
	dst  *net.IPNet
	via  net.IP
}

// syncRoutes installs a route to every peer reachable without a router
// and removes podnet's routes that match no peer (a node gone, or moved).
func (a *agent) syncRoutes(peers []peer) error {
	var errs []error
	want := map[string]netlink.Route{}
	for _, p := range peers {
		rs, err := netlink.RouteGet(p.via)
		if err != nil || len(rs) == 0 {
			errs = append(errs, fmt.Errorf("route to node %s (%s): %v", p.node, p.via, err))
			continue
		}
		r := rs[0]
		if r.Type == unix.RTN_LOCAL {
			// A node on this very host (another network of its own): its
			// bridge is here already.
			continue
		}
		direct := r.Gw == nil
		if was, seen := a.routed[p.node]; !seen || was != direct {
			a.routed[p.node] = direct
			if !direct {
				// Said for a few nodes (simulated nodes may be many).
				ev := a.o.Log.Debug()
				if a.unrouted++; a.unrouted <= 3 {
					ev = a.o.Log.Warn()
				}
				ev.Str("node", p.node).Str("ip", p.via.String()).Str("podCIDR", p.dst.String()).
					Msg("no route to this node's pods: it is not on a network this host reaches directly (host-gw routes need one L2 segment)")
			}
		}
		if !direct {
			continue
		}
		want[p.dst.String()] = netlink.Route{Dst: p.dst, Gw: p.via, LinkIndex: r.LinkIndex, Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
	}
	have, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list routes: %w", err))...)
	}
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		w, ok := want[r.Dst.String()]
		if ok && w.Gw.Equal(r.Gw) && w.LinkIndex == r.LinkIndex {
			delete(want, r.Dst.String())
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("remove route %s: %w", r.Dst, err))
		} else {
			a.o.Log.Info().Str("podCIDR", r.Dst.String()).Str("via", r.Gw.String()).Msg("route to a node's pods removed")
		}
	}
	for _, w := range want {
		if err := netlink.RouteReplace(&w); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", w.Dst, w.Gw, err))
		} else {
			a.o.Log.Info().Str("podCIDR", w.Dst.String()).Str("via", w.Gw.String()).Msg("route to a node's pods")
		}
	}
	return errors.Join(errs...)
}
