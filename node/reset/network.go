package reset

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sqlkube/sqlkube/node/podnet"
)

// cniCacheDir is where libcni (in containerd's CRI plugin) caches each
// attachment's configuration and result: results/NETWORK-CONTAINERID-IFNAME.
const cniCacheDir = "/var/lib/cni"

// cniAttachment is an entry of the CNI cache.
type cniAttachment struct {
	file, containerID, network string
	// netns is the sandbox's network namespace file ("" when unknown).
	netns string
	// ipamDir is host-local's data directory in the cached configuration.
	ipamDir string
}

// cniAttachments lists the entries of the CNI cache in dir.
func cniAttachments(dir string) ([]cniAttachment, error) {
	dir = filepath.Join(dir, "results")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []cniAttachment
	for _, e := range ents {
		var c struct {
			ContainerID string `json:"containerId"`
			NetworkName string `json:"networkName"`
			Config      []byte `json:"config"`
			Result      struct {
				Interfaces []struct {
					Sandbox string `json:"sandbox"`
				} `json:"interfaces"`
			} `json:"result"`
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(b, &c) != nil {
			continue // not a cache entry
		}
		a := cniAttachment{file: p, containerID: c.ContainerID, network: c.NetworkName}
		for _, i := range c.Result.Interfaces {
			if i.Sandbox != "" {
				a.netns = i.Sandbox
			}
		}
		var conf struct {
			Plugins []struct {
				IPAM struct {
					DataDir string `json:"dataDir"`
				} `json:"ipam"`
			} `json:"plugins"`
		}
		if json.Unmarshal(c.Config, &conf) == nil {
			for _, pl := range conf.Plugins {
				if pl.IPAM.DataDir != "" {
					a.ipamDir = pl.IPAM.DataDir
				}
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// removeNetns removes a network namespace file the runtime made (a bind
// mount of the namespace, as `ip netns add` makes): once no process is in
// it, the namespace goes, and its end of each veth with it.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// bridgePorts lists the links attached to the bridge named name (nil
// bridge when there is no such link).
func bridgePorts(name string) (netlink.Link, []netlink.Link, error) {
	br, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	links, err := netlink.LinkList()
	if err != nil {
		return br, nil, err
	}
	var ports []netlink.Link
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports = append(ports, l)
		}
	}
	return br, ports, nil
}

// deleteLink deletes a link; one already gone (a veth whose other end
// went with its namespace) is no error.
func deleteLink(l netlink.Link) error {
	err := netlink.LinkDel(l)
	if err != nil && (errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENOENT)) {
		return nil
	}
	return err
}

// podRoutes lists podnet's routes (its protocol in the main table): the
// routes to other nodes' pod CIDRs.
func podRoutes() ([]netlink.Route, error) {
	return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: podnet.RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
}

// routeString is a route as `ip route` shows its destination and gateway.
func routeString(r netlink.Route) string {
	s := "default"
	if r.Dst != nil {
		s = r.Dst.String()
	}
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	return s
}

// dialUnix connects to a unix socket, briefly.
func dialUnix(path string) (net.Conn, error) {
	return net.DialTimeout("unix", path, 2*time.Second)
}

// netnsName is a network namespace file's base name, as `ip netns` lists
// it.
func netnsName(path string) string { return strings.TrimSuffix(filepath.Base(path), "/") }
