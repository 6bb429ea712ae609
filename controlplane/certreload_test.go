package controlplane

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/pki"
)

func servedSerial(t *testing.T, r *reloadingCert) string {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

func TestReloadingCert_ServesRotated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	files, err := pki.Ensure(dir, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := newReloadingCert(files.ServingCert, files.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	before := servedSerial(t, r)
	if _, err := pki.Rotate(dir); err != nil {
		t.Fatal(err)
	}
	// On file systems with coarse timestamps the rewrite may keep the
	// modification time; move it on so the change is seen.
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(files.ServingCert, later, later); err != nil {
		t.Fatal(err)
	}
	if after := servedSerial(t, r); after == before {
		t.Fatal("the rotated certificate is not served")
	}
	// A broken pair keeps the last good one in use.
	if err := os.WriteFile(files.ServingCert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := r.GetCertificate(nil); err != nil || c == nil {
		t.Fatalf("after a bad write: %v %v", c, err)
	}
}
