package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// TestSecure_EncryptionAuditRotation drives `sqlkube server` with
// encryption at rest and an audit log, then rotates its certificates.
func TestSecure_EncryptionAuditRotation(t *testing.T) {
	kubectl := kubectls(t)["kubectl"]
	dataDir := t.TempDir()
	encryption := filepath.Join(t.TempDir(), "encryption.yaml")
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	if err := os.WriteFile(encryption, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: "+key+"\n  - identity: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dataDir, "audit.log")
	s := startCommand(t, dataDir, "server", "--encryption-provider-config", encryption, "--audit-log-path", auditLog)

	const plain = "e2e-plain-password"
	s.mustKubectl(t, kubectl, "create", "secret", "generic", "db", "--from-literal=password="+plain)
	if got := s.mustKubectl(t, kubectl, "get", "secret", "db", "-o", "jsonpath={.data.password}"); got != base64.StdEncoding.EncodeToString([]byte(plain)) {
		t.Fatalf("secret read back as %q", got)
	}
	s.stop(t) // the database and the audit log are complete

	files, _ := filepath.Glob(filepath.Join(dataDir, "state.db*"))
	var db []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		db = append(db, b...)
	}
	if bytes.Contains(db, []byte(plain)) || !bytes.Contains(db, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("the database files %v hold the secret in plain text, or no ciphertext", files)
	}

	log, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(log, []byte(plain)) || bytes.Contains(log, []byte(base64.StdEncoding.EncodeToString([]byte(plain)))) {
		t.Fatal("the audit log holds the secret")
	}
	var created bool
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var ev auditv1.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Kind != "Event" {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" && ev.Stage == auditv1.StageResponseComplete {
			created = ev.User.Username == "kubernetes-admin" && ev.ResponseStatus.Code == 201 && ev.Level == auditv1.LevelMetadata &&
				strings.HasPrefix(ev.UserAgent, "kubectl")
		}
	}
	if !created {
		t.Fatalf("no audit event of the secret's creation by kubernetes-admin:\n%s", log)
	}

	// Rotation: CAs kept, the kubeconfig it rewrites works with the new
	// serving certificate.
	ca, _ := os.ReadFile(filepath.Join(dataDir, "tls", "ca.crt"))
	oldServing, _ := os.ReadFile(filepath.Join(dataDir, "tls", "apiserver.crt"))
	if out, err := exec.Command(sqlkubeBin, "certs", "rotate", "--data-dir", dataDir).CombinedOutput(); err != nil {
		t.Fatalf("certs rotate: %v\n%s", err, out)
	}
	rotated := filepath.Join(t.TempDir(), "kubeconfig")
	if b, err := os.ReadFile(filepath.Join(dataDir, "kubeconfig")); err != nil || os.WriteFile(rotated, b, 0o600) != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dataDir, "tls", "ca.crt")); !bytes.Equal(b, ca) {
		t.Fatal("rotation changed the CA")
	}
	if b, _ := os.ReadFile(filepath.Join(dataDir, "tls", "apiserver.crt")); bytes.Equal(b, oldServing) {
		t.Fatal("rotation kept the serving certificate")
	}
	s = startCommand(t, dataDir, "server", "--encryption-provider-config", encryption)
	s.kubeconfig = rotated
	if got := s.mustKubectl(t, kubectl, "--server", s.url, "get", "secret", "db", "-o", "jsonpath={.data.password}"); got != base64.StdEncoding.EncodeToString([]byte(plain)) {
		t.Fatalf("after rotation the secret reads %q", got)
	}
}
