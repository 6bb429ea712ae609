package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectl_FieldValidation: kubectl finds fieldValidation in the
// OpenAPI documents and leaves unknown fields to the server, whose strict
// error it shows; --validate=false sends Ignore and the write succeeds.
func TestKubectl_FieldValidation(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			ns := "fv-" + strings.ReplaceAll(name, ".", "-")
			s.mustKubectl(t, bin, "create", "namespace", ns)
			manifest := filepath.Join(t.TempDir(), "cm.yaml")
			body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: odd\n  namespace: " + ns + "\ndata:\n  a: b\ncolour: red\n"
			if err := os.WriteFile(manifest, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"apply", "-f", manifest}, {"apply", "--server-side", "-f", manifest}, {"create", "-f", manifest}} {
				_, err := s.kubectl(t, bin, args...)
				if err == nil || !strings.Contains(err.Error(), `strict decoding error: unknown field "colour"`) {
					t.Fatalf("kubectl %s: got %v, want the server's strict decoding error", strings.Join(args, " "), err)
				}
			}
			if out := s.mustKubectl(t, bin, "apply", "--validate=false", "-f", manifest); !strings.Contains(out, "configmap/odd created") {
				t.Fatalf("apply --validate=false:\n%s", out)
			}
			// An existing object is patched: the patch is checked too.
			if _, err := s.kubectl(t, bin, "apply", "-f", manifest); err == nil || !strings.Contains(err.Error(), `strict decoding error: unknown field "colour"`) {
				t.Fatalf("kubectl apply over an existing object: got %v, want the server's strict decoding error", err)
			}
		})
	}
}
