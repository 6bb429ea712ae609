package e2e

import (
	"net"
	"path/filepath"
	"testing"
)

// TestKubectl_BindAddress: whatever --bind-address says, including every
// address (0.0.0.0, ::), the admin kubeconfig names an address kubectl on
// this host can use, the loopback one of the bound family, and kubectl
// works with it as written; the kubernetes Service's endpoint is the
// host's address, which the server also answers on under its
// certificate.
func TestKubectl_BindAddress(t *testing.T) {
	k := kubectlPath(t)
	for _, tc := range []struct {
		name, bind, local string
	}{
		{"default", "", "127.0.0.1"},
		{"0.0.0.0", "0.0.0.0", "127.0.0.1"},
		{"::", "::", "::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bind == "::" {
				l, err := net.Listen("tcp6", "[::1]:0")
				if err != nil {
					t.Skipf("skipping: this host has no IPv6 loopback (%v)", err)
				}
				l.Close()
			}
			args := []string{"server"}
			if tc.bind != "" {
				args = append(args, "--bind-address", tc.bind)
			}
			s := startCommand(t, filepath.Join(t.TempDir(), "data"), args...)
			want := "https://" + net.JoinHostPort(tc.local, s.port())
			if s.url != want {
				t.Errorf("the server announced %s, want %s", s.url, want)
			}
			if got := s.mustKubectl(t, k, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"); got != want {
				t.Fatalf("the admin kubeconfig names %q, want %q", got, want)
			}
			if out := s.mustKubectl(t, k, "get", "namespace", "kube-system", "-o", "name"); out != "namespace/kube-system\n" {
				t.Fatalf("kubectl get namespace: %q", out)
			}

			// The endpoint: the host's address, not a loopback one; the
			// server answers there, and its certificate names it.
			var ip string
			waitFor(t, commandTimeout, "the kubernetes endpoints", func() bool {
				ip, _ = s.kubectl(t, k, "get", "endpoints", "kubernetes", "-o", "jsonpath={.subsets[*].addresses[*].ip}")
				return ip != ""
			})
			if addr := net.ParseIP(ip); addr == nil || addr.IsLoopback() || addr.IsUnspecified() {
				t.Fatalf("the kubernetes endpoints name %q", ip)
			}
			if out := s.mustKubectl(t, k, "--server", "https://"+net.JoinHostPort(ip, s.port()), "get", "namespace", "default", "-o", "name"); out != "namespace/default\n" {
				t.Fatalf("kubectl at the advertised address: %q", out)
			}
		})
	}
}
