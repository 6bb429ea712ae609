package e2e

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/node/fake/faketest"
)

// TestFakeNodes_APIServer runs the simulated nodes' suite against
// `sqlkube apiserver` in a process of its own, over HTTPS with the admin
// kubeconfig, as any API client would reach it.
func TestFakeNodes_APIServer(t *testing.T) {
	dir := t.TempDir()
	s := startCommand(t, dir, "apiserver", "--datastore", "sqlite://"+filepath.Join(dir, "state.db"))
	cfg := s.restConfig(t, s.kubeconfig)
	faketest.Run(t, cfg, cfg, "api-")
}

// TestKubectl_FakeNodes: `sqlkube server --fake-nodes 2` shows kubectl two
// Ready nodes, and a pod bound to one runs there with an IP.
func TestKubectl_FakeNodes(t *testing.T) {
	bins := kubectls(t)
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "2")
	var v struct{ GitVersion string }
	if err := json.Unmarshal([]byte(s.mustKubectl(t, bins["kubectl"], "get", "--raw", "/version")), &v); err != nil || v.GitVersion == "" {
		t.Fatalf("server version: %v", err)
	}
	version := v.GitVersion
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			ns := "fake-" + strings.ReplaceAll(name, ".", "-")
			s.waitKubectl(t, bin, "True True", "get", "node", "fake-0", "fake-1", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status} {end}`)
			out := s.mustKubectl(t, bin, "get", "nodes")
			if !regexp.MustCompile(`NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^fake-0\s+Ready\s+<none>\s+\S+\s+`+regexp.QuoteMeta(version)+`$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^fake-1\s+Ready\s+`).MatchString(out) {
				t.Fatalf("get nodes (server %s):\n%s", version, out)
			}
			s.mustKubectl(t, bin, "create", "namespace", ns)
			// The namespace's default service account comes from a
			// controller; run retries until it is there.
			s.waitKubectl(t, bin, "pod/web created", "-n", ns, "run", "web", "--image=nginx:1.27", `--overrides={"apiVersion":"v1","spec":{"nodeName":"fake-1"}}`)
			s.waitKubectl(t, bin, "Running", "-n", ns, "get", "pod", "web", "-o", "jsonpath={.status.phase}")
			out = s.mustKubectl(t, bin, "-n", ns, "get", "pods", "-o", "wide")
			if !regexp.MustCompile(`(?m)^web\s+1/1\s+Running\s+0\s+\S+\s+10\.\d+\.\d+\.\d+\s+fake-1\s+`).MatchString(out) {
				t.Fatalf("get pods -o wide:\n%s", out)
			}
			s.mustKubectl(t, bin, "delete", "namespace", ns, "--wait=false")
		})
	}
}

// waitKubectl runs kubectl until its trimmed output is want, for up to
// commandTimeout.
func (s *server) waitKubectl(t *testing.T, bin, want string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(commandTimeout)
	for {
		out, err := s.kubectl(t, bin, args...)
		if strings.TrimSpace(out) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl %s: got %q (%v), want %q", strings.Join(args, " "), out, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
