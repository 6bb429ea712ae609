package clusterdns

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of a Config.
const (
	// DefaultDomain is the cluster domain, as kubeadm's.
	DefaultDomain = "cluster.local"
	// DefaultPort is where each server answers DNS: pods reach it through
	// the kube-dns Service (port 53, which kube-proxy translates), so it
	// need not be 53 itself. An unprivileged port needs no root and does
	// not collide with a resolver the host already runs on 53
	// (systemd-resolved, dnsmasq).
	DefaultPort = 10053
	// DefaultUpstream: names outside the cluster go to the host's
	// resolvers.
	DefaultUpstream = "/etc/resolv.conf"
)

// Config is what the Corefile sqlkube writes says.
type Config struct {
	// Address and Port are where the server listens, on UDP and TCP.
	Address net.IP
	Port    int
	// Domain is the cluster domain (default DefaultDomain).
	Domain string
	// Upstreams answer every other name: IP or IP:port addresses, or
	// the path of a resolv.conf whose nameservers are used (default
	// DefaultUpstream).
	Upstreams []string
}

// withDefaults fills in the defaults and checks c.
func (c Config) withDefaults() (Config, error) {
	if c.Address == nil {
		return c, errors.New("clusterdns: no listen address")
	}
	if c.Port <= 0 || c.Port > 65535 {
		return c, fmt.Errorf("clusterdns: port %d out of range", c.Port)
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	c.Domain = strings.TrimSuffix(c.Domain, ".")
	if errs := validation.IsDNS1123Subdomain(c.Domain); len(errs) > 0 {
		return c, fmt.Errorf("clusterdns: cluster domain %q: %s", c.Domain, strings.Join(errs, "; "))
	}
	if len(c.Upstreams) == 0 {
		c.Upstreams = []string{DefaultUpstream}
	}
	for _, u := range c.Upstreams {
		// Each goes into the Corefile as one token.
		if u == "" || strings.ContainsAny(u, " \t\r\n{}#\"") {
			return c, fmt.Errorf("clusterdns: upstream %q: want an address or a file path", u)
		}
	}
	return c, nil
}

// Corefile is the CoreDNS configuration of c (defaults filled in): the
// cluster domain and the reverse zones from the cluster's objects, pod
// names by address (pods insecure, as kubeadm's), reverse names the
// cluster does not know and every other name forwarded upstream, and a
// cache for what is forwarded (cluster names change with their objects,
// so they are not cached).
func (c Config) Corefile() (string, error) {
	c, err := c.withDefaults()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".:%d {\n", c.Port)
	fmt.Fprintf(&b, "    bind %s\n", c.Address)
	b.WriteString("    errors\n")
	b.WriteString("    cache 30 {\n")
	fmt.Fprintf(&b, "        disable success %s\n", c.Domain)
	fmt.Fprintf(&b, "        disable denial %s\n", c.Domain)
	b.WriteString("    }\n")
	fmt.Fprintf(&b, "    %s %s in-addr.arpa ip6.arpa {\n", directive, c.Domain)
	b.WriteString("        pods insecure\n")
	b.WriteString("        fallthrough in-addr.arpa ip6.arpa\n")
	b.WriteString("        ttl 30\n")
	b.WriteString("    }\n")
	fmt.Fprintf(&b, "    forward . %s\n", strings.Join(c.Upstreams, " "))
	b.WriteString("}\n")
	return b.String(), nil
}

// listenAddress is host:port of c.
func (c Config) listenAddress() string {
	return net.JoinHostPort(c.Address.String(), strconv.Itoa(c.Port))
}
