package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestKubectl_Auth: `kubectl auth can-i` (one question and --list) and
// `kubectl auth whoami` for a static-token user with a namespaced Role,
// and for a bootstrap token made by `sqlkube token create`.
func TestKubectl_Auth(t *testing.T) {
	bins := kubectls(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("dev-token,dev,100,devs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startCommand(t, filepath.Join(dir, "data"), "server", "--token-auth-file", tokens)
	admin := bins["kubectl"]
	s.mustKubectl(t, admin, "create", "namespace", "e2e-auth")
	s.mustKubectl(t, admin, "-n", "e2e-auth", "create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps")
	s.mustKubectl(t, admin, "-n", "e2e-auth", "create", "rolebinding", "dev-reads", "--role=cm-reader", "--user=dev")
	dev := s.asToken(t, "dev-token")
	// dev may impersonate jane, and no one else.
	s.mustKubectl(t, admin, "create", "clusterrole", "impersonate-jane", "--verb=impersonate", "--resource=users", "--resource-name=jane")
	s.mustKubectl(t, admin, "create", "clusterrolebinding", "dev-impersonates-jane", "--clusterrole=impersonate-jane", "--user=dev")

	token := strings.TrimSpace(s.sqlkube(t, "token", "create", "--ttl", "1h", "--description", "e2e"))
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(token) {
		t.Fatalf("sqlkube token create printed %q", token)
	}
	if out := s.sqlkube(t, "token", "list"); !strings.Contains(out, token) || !strings.Contains(out, "e2e") || !strings.Contains(out, "authentication,signing") {
		t.Fatalf("sqlkube token list:\n%s", out)
	}
	boot := s.asToken(t, token)

	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			// The binding reaches the authorizer through informers: the
			// first question may race it.
			if out := s.eventually(t, dev, bin, "yes", "auth", "can-i", "list", "configmaps", "-n", "e2e-auth"); out != "yes" {
				t.Fatalf("can-i list configmaps in e2e-auth: %q", out)
			}
			for _, args := range [][]string{
				{"auth", "can-i", "delete", "configmaps", "-n", "e2e-auth"},
				{"auth", "can-i", "list", "configmaps", "-n", "default"},
				{"auth", "can-i", "get", "secrets", "-n", "e2e-auth"},
			} {
				// "no" exits 1.
				out, err := s.kubectlWith(t, dev, bin, args...)
				if strings.TrimSpace(out) != "no" || err == nil {
					t.Errorf("%s: %q %v, want no", strings.Join(args, " "), out, err)
				}
			}
			list := s.mustKubectlWith(t, dev, bin, "auth", "can-i", "--list", "-n", "e2e-auth")
			if !regexp.MustCompile(`(?m)^configmaps\s+\[\]\s+\[\]\s+\[get list\]`).MatchString(list) ||
				!regexp.MustCompile(`(?m)^selfsubjectaccessreviews\.authorization\.k8s\.io\s+\[\]\s+\[\]\s+\[create\]`).MatchString(list) {
				t.Errorf("can-i --list in e2e-auth:\n%s", list)
			}
			if list := s.mustKubectlWith(t, dev, bin, "auth", "can-i", "--list", "-n", "default"); strings.Contains(list, "configmaps ") {
				t.Errorf("can-i --list in default shows configmaps:\n%s", list)
			}
			// Impersonation: the admin (system:masters) may act as
			// anyone; the answers are the impersonated user's.
			if out, err := s.kubectl(t, bin, "auth", "can-i", "get", "pods", "--as=system:serviceaccount:default:nobody"); strings.TrimSpace(out) != "no" || err == nil {
				t.Errorf("can-i get pods --as=system:serviceaccount:default:nobody: %q %v, want no", out, err)
			}
			if out, err := s.kubectl(t, bin, "auth", "can-i", "list", "configmaps", "-n", "e2e-auth", "--as=someone", "--as-group=devs"); strings.TrimSpace(out) != "no" || err == nil {
				t.Errorf("can-i list configmaps --as=someone --as-group=devs: %q %v, want no", out, err)
			}
			if out := s.mustKubectl(t, bin, "auth", "can-i", "list", "configmaps", "-n", "e2e-auth", "--as=dev"); strings.TrimSpace(out) != "yes" {
				t.Errorf("can-i list configmaps --as=dev: %q, want yes", out)
			}
			// dev's right to impersonate jane reaches the authorizer
			// through informers: the first question may race it.
			if out := s.eventually(t, dev, bin, "no", "auth", "can-i", "list", "configmaps", "-n", "e2e-auth", "--as=jane"); out != "no" {
				t.Errorf("dev: can-i list configmaps --as=jane: %q, want no", out)
			}
			for _, as := range []string{"--as=joe", "--as=system:serviceaccount:default:default"} {
				if out, err := s.kubectlWith(t, dev, bin, "auth", "can-i", "list", "configmaps", as); err == nil || !strings.Contains(out+err.Error(), `cannot impersonate`) {
					t.Errorf("dev: can-i %s: %q %v, want Forbidden", as, out, err)
				}
			}
			// (With discovery refused too, kubectl may not print the
			// message, only the reason.)
			if out, err := s.kubectlWith(t, dev, bin, "get", "configmaps", "-n", "e2e-auth", "--as=jane", "--as-group=ops"); err == nil || !strings.Contains(out+err.Error(), `Error from server (Forbidden)`) {
				t.Errorf("dev: get configmaps --as=jane --as-group=ops: %q %v, want Forbidden", out, err)
			}
			// whoami is v1 (GA) from kubectl 1.28; 1.27 asks for
			// v1beta1, served too.
			if out := s.mustKubectlWith(t, dev, bin, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); out != `dev ["devs","system:authenticated"]` {
				t.Errorf("whoami as dev: %q", out)
			}
			if out := s.mustKubectl(t, bin, "auth", "whoami", "--as=jane", "--as-group=devs", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); out != `jane ["devs","system:authenticated"]` {
				t.Errorf("whoami --as=jane --as-group=devs: %q", out)
			}
			if out := s.mustKubectlWith(t, dev, bin, "auth", "whoami", "--as=jane", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); out != `jane ["system:authenticated"]` {
				t.Errorf("dev: whoami --as=jane: %q", out)
			}
			if out := s.eventually(t, boot, bin, "system:bootstrap:"+token[:6], "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "system:bootstrap:"+token[:6] {
				t.Errorf("whoami with the bootstrap token: %q", out)
			}
			if out, err := s.kubectlWith(t, boot, bin, "get", "secrets", "-n", "kube-system"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
				t.Errorf("bootstrap token lists kube-system secrets: %q %v, want Forbidden", out, err)
			}
		})
	}
	if out := s.sqlkube(t, "token", "delete", token); !strings.Contains(out, "deleted") {
		t.Fatalf("sqlkube token delete: %q", out)
	}
	if out := s.sqlkube(t, "token", "list"); strings.Contains(out, token) {
		t.Fatalf("sqlkube token list after delete:\n%s", out)
	}
}

// asToken writes a kubeconfig that reaches s with the admin kubeconfig's
// server and CA but authenticates with token alone (no client
// certificate, which would win).
func (s *server) asToken(t *testing.T, token string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubectlWith runs kubectl with another kubeconfig.
func (s *server) kubectlWith(t *testing.T, kubeconfig, bin string, args ...string) (string, error) {
	t.Helper()
	return s.kubectl(t, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

func (s *server) mustKubectlWith(t *testing.T, kubeconfig, bin string, args ...string) string {
	t.Helper()
	out, err := s.kubectlWith(t, kubeconfig, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// eventually runs kubectl until its trimmed output is want (a binding or
// token reaches the server through informers), returning the last output.
func (s *server) eventually(t *testing.T, kubeconfig, bin, want string, args ...string) string {
	t.Helper()
	var out string
	for i := 0; i < 50; i++ {
		o, _ := s.kubectlWith(t, kubeconfig, bin, args...)
		if out = strings.TrimSpace(o); out == want {
			break
		}
	}
	return out
}

// sqlkube runs `sqlkube ARGS... --data-dir DATA_DIR` and returns stdout.
func (s *server) sqlkube(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, sqlkubeBin, append(args, "--data-dir", s.dataDir)...).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += "\n" + string(ee.Stderr)
		}
		t.Fatalf("sqlkube %s: %s", strings.Join(args, " "), msg)
	}
	return string(out)
}
