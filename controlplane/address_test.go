package controlplane

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/apiserver/pki"
)

func TestListenAddresses(t *testing.T) {
	for _, tc := range []struct {
		bind, network, url string
	}{
		{"0.0.0.0", "tcp4", "https://127.0.0.1:6443"},
		{"::", "tcp", "https://[::1]:6443"},
		{"127.0.0.1", "tcp4", "https://127.0.0.1:6443"},
		{"192.0.2.9", "tcp4", "https://192.0.2.9:6443"},
		{"2001:db8::9", "tcp6", "https://[2001:db8::9]:6443"},
		{"localhost", "tcp", "https://localhost:6443"},
	} {
		if got := listenNetwork(tc.bind); got != tc.network {
			t.Errorf("listenNetwork(%q) = %q, want %q", tc.bind, got, tc.network)
		}
		if got := localURL(tc.bind, 6443); got != tc.url {
			t.Errorf("localURL(%q) = %q, want %q", tc.bind, got, tc.url)
		}
	}
}

func TestListensOn(t *testing.T) {
	v4, v6 := net.ParseIP("192.0.2.9"), net.ParseIP("2001:db8::9")
	for _, tc := range []struct {
		bind string
		ip   net.IP
		want bool
	}{
		{"0.0.0.0", v4, true},
		{"0.0.0.0", v6, false},
		{"::", v4, true},
		{"::", v6, true},
		{"192.0.2.9", v4, true},
		{"127.0.0.1", v4, false},
		{"myhost", v4, false},
	} {
		if got := listensOn(tc.bind, tc.ip); got != tc.want {
			t.Errorf("listensOn(%q, %s) = %v, want %v", tc.bind, tc.ip, got, tc.want)
		}
	}
}

// TestAdvertiseAddress: the advertised address is the operator's, else a
// bind address pods reach, else the host's; never loopback, unspecified
// or IPv6.
func TestAdvertiseAddress(t *testing.T) {
	for _, tc := range []struct {
		name, advertise, bind string
		want                  string // "" for the host's address
		err                   string
	}{
		{name: "given", advertise: "192.0.2.20", bind: "0.0.0.0", want: "192.0.2.20"},
		{name: "given loopback", advertise: "127.0.0.2", bind: "0.0.0.0", err: "loopback"},
		{name: "given unspecified", advertise: "0.0.0.0", bind: "0.0.0.0", err: "loopback or unspecified"},
		{name: "given IPv6", advertise: "2001:db8::1", bind: "::", err: "IPv4"},
		{name: "not an IP", advertise: "api.example.com", bind: "0.0.0.0", err: "not an IP"},
		{name: "bound to one address", bind: "192.0.2.9", want: "192.0.2.9"},
		{name: "default", bind: DefaultBindAddress},
		{name: "every address", bind: "::"},
		{name: "loopback", bind: "127.0.0.1"},
		{name: "IPv6 address", bind: "2001:db8::9"},
		{name: "host name", bind: "localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip, why, err := advertiseAddress(&Config{Advertise: tc.advertise, BindAddress: tc.bind})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error saying %q", ip, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "" {
				if ip.String() != tc.want {
					t.Fatalf("got %v, want %s", ip, tc.want)
				}
				return
			}
			if ip == nil {
				if why == "" {
					t.Fatal("no address and no reason")
				}
				t.Skipf("this host has no address to advertise: %s", why)
			}
			if ip.IsLoopback() || ip.IsUnspecified() || ip.To4() == nil {
				t.Fatalf("advertised %s", ip)
			}
		})
	}
}

// TestServingCertificate_Names: with any bind address the serving
// certificate verifies under the host the admin kubeconfig names, the
// advertised address, the kubernetes Service's IP and names (the full
// one with --cluster-domain), --tls-san and --kubeconfig-server's host;
// it never names an unspecified address; a changed --tls-san or
// advertised address issues it again.
func TestServingCertificate_Names(t *testing.T) {
	serviceIP := net.ParseIP("10.96.0.1")
	for _, bind := range []string{"0.0.0.0", "::", "127.0.0.1", "192.0.2.9", "localhost"} {
		t.Run(bind, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "tls")
			f := &Config{BindAddress: bind, TLSSANs: []string{"api.example.com", "203.0.113.5"},
				KubeconfigServer: "https://lb.example.com:8443", DNS: DNSConfig{Domain: "corp.internal"}}
			advertise := net.ParseIP("192.0.2.20")
			files, err := pki.Ensure(dir, pki.Options{Hosts: servingHosts(f, advertise, serviceIP), ClusterDomain: f.DNS.Domain})
			if err != nil {
				t.Fatal(err)
			}
			c := servingCert(t, files)
			roots := x509.NewCertPool()
			roots.AddCert(servingCA(t, files))
			for _, name := range []string{localHost(bind), "192.0.2.20", "10.96.0.1", "kubernetes", "kubernetes.default",
				"kubernetes.default.svc", "kubernetes.default.svc.corp.internal", "api.example.com", "203.0.113.5", "lb.example.com"} {
				if _, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
					t.Errorf("does not verify as %s: %v", name, err)
				}
			}
			for _, ip := range c.IPAddresses {
				if ip.IsUnspecified() {
					t.Errorf("names the unspecified address %s", ip)
				}
			}

			f.TLSSANs = []string{"api.example.com"}
			files, err = pki.Ensure(dir, pki.Options{Hosts: servingHosts(f, net.ParseIP("192.0.2.21"), serviceIP), ClusterDomain: f.DNS.Domain})
			if err != nil {
				t.Fatal(err)
			}
			again := servingCert(t, files)
			if again.SerialNumber.Cmp(c.SerialNumber) == 0 {
				t.Fatal("not issued again for another --tls-san and advertised address")
			}
			if slices.ContainsFunc(again.IPAddresses, net.ParseIP("203.0.113.5").Equal) || slices.ContainsFunc(again.IPAddresses, advertise.Equal) ||
				!slices.ContainsFunc(again.IPAddresses, net.ParseIP("192.0.2.21").Equal) {
				t.Fatalf("issued again for %v", again.IPAddresses)
			}
		})
	}
}

func servingCert(t *testing.T, files pki.Files) *x509.Certificate {
	t.Helper()
	certs, err := cert.CertsFromFile(files.ServingCert)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func servingCA(t *testing.T, files pki.Files) *x509.Certificate {
	t.Helper()
	certs, err := cert.CertsFromFile(files.CACert)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}
