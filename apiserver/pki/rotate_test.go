package pki

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := cert.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestRotate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	f, err := Ensure(dir, Options{Hosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureEtcd(dir, []string{"10.1.2.3"}); err != nil {
		t.Fatal(err)
	}
	// Leaves issued 300 days ago, so the renewal's NotAfter is later.
	if _, err := rotate(dir, time.Now().Add(-300*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	kept := map[string][]byte{}
	for _, p := range []string{f.CACert, f.CAKey, f.ClientCACert, f.ClientCAKey, f.FrontProxyCACert, f.FrontProxyCAKey, f.ServiceAccountKey, f.ServiceAccount} {
		if kept[p], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]*x509.Certificate{}
	leaves := []string{f.ServingCert, f.AdminCert, f.FrontProxyClientCert, f.EtcdServerCert, f.EtcdClientCert}
	for _, p := range leaves {
		before[p] = readCert(t, p)
	}

	renewed, err := Rotate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(renewed, leaves) {
		t.Fatalf("renewed %v, want %v", renewed, leaves)
	}
	for p, b := range kept {
		if got, _ := os.ReadFile(p); !bytes.Equal(got, b) {
			t.Fatalf("%s changed", p)
		}
	}
	for _, p := range leaves {
		old, now := before[p], readCert(t, p)
		if now.SerialNumber.Cmp(old.SerialNumber) == 0 || !now.NotAfter.After(old.NotAfter) ||
			now.Subject.String() != old.Subject.String() || !slices.Equal(now.DNSNames, old.DNSNames) ||
			len(now.IPAddresses) != len(old.IPAddresses) || !slices.Equal(now.ExtKeyUsage, old.ExtKeyUsage) {
			t.Fatalf("%s: renewed %v (serial %v, until %v), was %v (serial %v, until %v)", p, now.Subject, now.SerialNumber, now.NotAfter, old.Subject, old.SerialNumber, old.NotAfter)
		}
	}
	// Clients holding the old CA files verify the new certificates.
	pool := func(pem []byte) *x509.CertPool {
		p := x509.NewCertPool()
		p.AppendCertsFromPEM(pem)
		return p
	}
	if _, err := readCert(t, f.ServingCert).Verify(x509.VerifyOptions{Roots: pool(kept[f.CACert]), DNSName: "api.example.com"}); err != nil {
		t.Fatalf("new serving certificate with the old CA: %v", err)
	}
	if _, err := readCert(t, f.EtcdServerCert).Verify(x509.VerifyOptions{Roots: pool(kept[f.CACert]), DNSName: "10.1.2.3"}); err != nil {
		t.Fatalf("new etcd serving certificate with the old CA: %v", err)
	}
	admin := readCert(t, f.AdminCert)
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool(kept[f.ClientCACert]), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Fatalf("new admin certificate: %v %v", err, admin.Subject)
	}
	// Ensure at start keeps the renewed certificates.
	if _, err := Ensure(dir, Options{Hosts: []string{"api.example.com"}}); err != nil {
		t.Fatal(err)
	}
	if got := readCert(t, f.ServingCert); got.SerialNumber.Cmp(readCert(t, renewed[0]).SerialNumber) != 0 {
		t.Fatal("Ensure replaced the renewed serving certificate")
	}

	list, err := Certificates(dir)
	if err != nil || len(list) != 8 || !list[0].CA || !list[1].CA || !list[2].CA || list[3].CA {
		t.Fatalf("Certificates: %v %+v", err, list)
	}
}

func TestRotate_NoPKI(t *testing.T) {
	if _, err := Rotate(t.TempDir()); err == nil {
		t.Fatal("rotating an empty directory succeeded")
	}
}
