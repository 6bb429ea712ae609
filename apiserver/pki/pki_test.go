package pki

import (
	"path/filepath"
	"testing"
)

// TestFilesIn_Absolute: a relative directory (make run's ./sqlkube-data)
// gives absolute file names, which a kubeconfig elsewhere can name.
func TestFilesIn_Absolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	f := FilesIn(filepath.Join("data", "tls"))
	want := filepath.Join(dir, "data", "tls")
	if f.Dir != want {
		t.Errorf("Dir = %q, want %q", f.Dir, want)
	}
	for _, p := range []string{f.CACert, f.ClientCAKey, f.AdminCert, f.ServiceAccountKey, f.EtcdClientKey} {
		if !filepath.IsAbs(p) || filepath.Dir(p) != want {
			t.Errorf("%q is not a file of %q", p, want)
		}
	}
}
