package testcert

import (
	"crypto/x509"
	"testing"
	"time"
)

// TestServing: the certificate verifies against the CA for each name, and
// for no other.
func TestServing(t *testing.T) {
	caPEM, cert := Serving(t, "hooks.svc", "127.0.0.1")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hooks.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: time.Now()}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.svc", Roots: pool}); err == nil {
		t.Error("verified for a name it was not made for")
	}
}
