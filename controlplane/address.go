package controlplane

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// The API's addresses, chosen as k3s and kube-apiserver choose them: the
// API listens on every address by default (--bind-address 0.0.0.0), so
// that pods (through the kubernetes Service, whose endpoint is the
// advertised address), nodes that join and kubectl on this host all reach
// it with no flag; every request but the health checks (/healthz,
// /livez, /readyz, /version) must authenticate. The advertised address is
// the host's (that of the default route's interface), never a loopback
// one, which pods could not reach and kube-apiserver refuses in
// endpoints. The admin kubeconfig and this host's node use the loopback
// address when the API listens on every address. An operator who wants
// the API on one address only gives --bind-address; on a loopback one,
// pods cannot reach the API (a warning says so).

// DefaultBindAddress is --bind-address's default: every IPv4 address.
const DefaultBindAddress = "0.0.0.0"

// listenNetwork is net.Listen's network for a --bind-address: tcp4 for
// an IPv4 address (0.0.0.0 is every IPv4 address, as its name says, where
// Go's "tcp" would take IPv6 too), tcp6 for an IPv6 one but ::, and tcp
// (IPv6 and IPv4) for :: and host names.
func listenNetwork(bind string) string {
	ip := net.ParseIP(bind)
	switch {
	case ip == nil:
		return "tcp"
	case ip.To4() != nil:
		return "tcp4"
	case ip.IsUnspecified():
		return "tcp"
	default:
		return "tcp6"
	}
}

// localHost is the host clients on this host reach the API at for a
// --bind-address: the loopback address of its family when it is
// unspecified (127.0.0.1 for 0.0.0.0, ::1 for ::), else the address or
// name itself.
func localHost(bind string) string {
	ip := net.ParseIP(bind)
	switch {
	case ip == nil || !ip.IsUnspecified():
		return bind
	case ip.To4() != nil:
		return "127.0.0.1"
	default:
		return "::1"
	}
}

// localURL is the API's URL for clients on this host.
func localURL(bind string, port int) string {
	return "https://" + net.JoinHostPort(localHost(bind), strconv.Itoa(port))
}

// advertiseAddress is the IP the kubernetes Service's endpoints name:
// --advertise-address; else --bind-address when it is one address pods
// can reach; else the host's address (that of the default route's
// interface, IPv4 as the service range). It is never loopback or
// unspecified (kube-apiserver refuses those in endpoints, and pods could
// not reach them) and never IPv6 (the service range is IPv4). A nil IP
// with a nil error: the host has no such address; why says so.
func advertiseAddress(f *Config) (ip net.IP, why string, err error) {
	if f.Advertise != "" {
		ip := net.ParseIP(f.Advertise)
		switch {
		case ip == nil:
			return nil, "", fmt.Errorf("--advertise-address %q is not an IP", f.Advertise)
		case ip.IsLoopback() || ip.IsUnspecified():
			return nil, "", fmt.Errorf("--advertise-address %s: pods cannot reach a loopback or unspecified address (and Kubernetes refuses it as an endpoint); give one of the host's other addresses", ip)
		case ip.To4() == nil:
			return nil, "", fmt.Errorf("--advertise-address %s: want an IPv4 address, as the service cluster IP range", ip)
		}
		return ip, "", nil
	}
	if ip := net.ParseIP(f.BindAddress); ip != nil && ip.To4() != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		return ip, "", nil
	}
	ip, err = utilnet.ChooseHostInterface()
	if err != nil {
		return nil, fmt.Sprintf("the host has no address pods can reach (%v)", err), nil
	}
	if ip.To4() == nil {
		return nil, fmt.Sprintf("the host's address %s is not an IPv4 one, as the service range", ip), nil
	}
	return ip, "", nil
}

// listensOn reports whether a server bound to bind serves ip (false for
// a host name, which may or may not be ip).
func listensOn(bind string, ip net.IP) bool {
	b := net.ParseIP(bind)
	if b == nil {
		return false
	}
	if b.IsUnspecified() {
		return b.To4() == nil || ip.To4() != nil // :: takes IPv4 too
	}
	return b.Equal(ip)
}

// servingHosts are the serving certificate's names and IPs besides
// pki.APIServerNames: --tls-san, --bind-address unless it is every
// address, the advertised address, the kubernetes Service's IP and the
// host of --kubeconfig-server.
func servingHosts(f *Config, advertise, serviceIP net.IP) []string {
	hosts := append([]string{}, f.TLSSANs...)
	if ip := net.ParseIP(f.BindAddress); ip == nil || !ip.IsUnspecified() {
		hosts = append(hosts, f.BindAddress)
	}
	if advertise != nil {
		hosts = append(hosts, advertise.String())
	}
	if serviceIP != nil {
		hosts = append(hosts, serviceIP.String())
	}
	if u, err := url.Parse(f.KubeconfigServer); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	return hosts
}
