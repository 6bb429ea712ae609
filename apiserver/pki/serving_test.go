package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// sanStrings lists c's DNS names and IPs as strings, sorted.
func sanStrings(c *x509.Certificate) []string {
	out := append(slices.Clone(c.DNSNames), ipStrings(c.IPAddresses)...)
	slices.Sort(out)
	return out
}

// TestEnsure_ServingNames: the serving certificate carries every name
// kube-apiserver's carries (the kubernetes Service's four names with the
// cluster domain, its IP through Hosts, the advertised address), the
// loopback addresses and the host name, each once, and verifies under
// each of them.
func TestEnsure_ServingNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	hosts := []string{"10.96.0.1", "192.0.2.7", "api.example.com", "192.0.2.7", "2001:db8::7", ""}
	f, err := Ensure(dir, Options{Hosts: hosts, ClusterDomain: "corp.internal"})
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, f.ServingCert)
	want := []string{"127.0.0.1", "::1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.corp.internal", "10.96.0.1", "192.0.2.7", "api.example.com", "2001:db8::7"}
	if h, err := os.Hostname(); err == nil && h != "" {
		want = append(want, h)
	}
	slices.Sort(want)
	if got := sanStrings(c); !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, f.CACert))
	for _, name := range want {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("does not verify as %s: %v", name, err)
		}
	}

	// Without a domain, the default one.
	if got := APIServerNames(""); !slices.Contains(got, "kubernetes.default.svc.cluster.local") {
		t.Errorf("APIServerNames(\"\") = %v, want kubernetes.default.svc.cluster.local among them", got)
	}
}

// TestEnsure_ReissuesOnChange: the serving certificate is kept while its
// names are the same (in any order) and issued again, from the same CA,
// when a name is added, one goes, or the domain changes.
func TestEnsure_ReissuesOnChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ensure := func(o Options) *x509.Certificate {
		t.Helper()
		f, err := Ensure(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return readCert(t, f.ServingCert)
	}
	first := ensure(Options{Hosts: []string{"192.0.2.7", "a.example.com"}})
	ca := readCert(t, FilesIn(dir).CACert)

	if again := ensure(Options{Hosts: []string{"a.example.com", "192.0.2.7", "a.example.com"}}); again.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("the same names issued a new certificate")
	}
	steps := []struct {
		name  string
		opts  Options
		has   []string
		lacks []string
	}{
		{"a --tls-san added", Options{Hosts: []string{"192.0.2.7", "a.example.com", "b.example.com"}}, []string{"b.example.com", "a.example.com"}, nil},
		{"a --tls-san gone", Options{Hosts: []string{"192.0.2.7", "a.example.com"}}, []string{"a.example.com"}, []string{"b.example.com"}},
		{"another advertised address", Options{Hosts: []string{"192.0.2.8", "a.example.com"}}, []string{"192.0.2.8"}, []string{"192.0.2.7"}},
		{"another cluster domain", Options{Hosts: []string{"192.0.2.8", "a.example.com"}, ClusterDomain: "corp.internal"},
			[]string{"kubernetes.default.svc.corp.internal"}, []string{"kubernetes.default.svc.cluster.local"}},
	}
	prev := first
	for _, s := range steps {
		c := ensure(s.opts)
		if c.SerialNumber.Cmp(prev.SerialNumber) == 0 {
			t.Fatalf("%s: the certificate was not issued again", s.name)
		}
		if err := c.CheckSignatureFrom(ca); err != nil {
			t.Fatalf("%s: not from the cluster CA: %v", s.name, err)
		}
		names := sanStrings(c)
		for _, h := range s.has {
			if !slices.Contains(names, h) {
				t.Errorf("%s: %s missing from %v", s.name, h, names)
			}
		}
		for _, h := range s.lacks {
			if slices.Contains(names, h) {
				t.Errorf("%s: %s still in %v", s.name, h, names)
			}
		}
		prev = c
	}
	// The CA itself never changes.
	if now := readCert(t, FilesIn(dir).CACert); !now.Equal(ca) {
		t.Fatal("the CA changed")
	}
}
