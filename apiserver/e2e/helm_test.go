package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/internal/testcert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// helmTimeout bounds one helm command; helm's own --timeout (what it
// waits for resources and hooks) is helmWait.
const (
	helmTimeout = 3 * time.Minute
	helmWait    = "2m"
)

// TestHelm: real Helm, v3 and v4 (v4 applies server-side by default),
// each against its own `sqlkube server --fake-nodes 3` with an audit log,
// installs, upgrades (replicas and an env var), rolls back and uninstalls
// a chart the test writes: a Deployment and a Service selecting its
// pods, an aggregated APIService in front of a backend in the test
// process, and a Job run as a post-install/upgrade/rollback hook. Every
// command waits (--wait) and must succeed; after each step the objects
// are what the release says (replicas, env, a cluster IP that stays the
// same, endpoints for the ready pods, the APIService Available and its
// group in discovery, helm's own discovery of it as rendered into the
// chart, the hook Job run to success and deleted by helm), after
// uninstall they are all gone; the server logs no panic and answers no
// request with a 5xx. The chart is in helm_chart_test.go, the checks in
// helm_checks_test.go.
//
// Helm binaries come from `make test-deps-helm` (HELM_DIR/helm-v3/helm and
// HELM_DIR/helm-v4/helm; SQLKUBE_HELM_DIR, or GOPATH/bin by default);
// a missing one is skipped with a line, or fails under CI=true.
func TestHelm(t *testing.T) {
	ip := testcert.HostIPv4(t) // EndpointSlices may not name loopback addresses
	for _, major := range []string{"v3", "v4"} {
		t.Run(major, func(t *testing.T) {
			h := helmBinary(t, major)
			dir := t.TempDir()
			auditLog := filepath.Join(dir, "audit.log")
			s := startCommand(t, filepath.Join(dir, "data"), "server", "--fake-nodes", "3", "--audit-log-path", auditLog)
			// Runs even when a step fails: a server that died or logged
			// a panic, or answered 5xx, is the likeliest reason.
			defer checkServerHealth(t, s, auditLog)
			h.env = helmEnv(t, s.kubeconfig)
			testHelmRelease(t, h, s, ip, auditLog)
		})
	}
}

// testHelmRelease runs the release's life with h against s.
func testHelmRelease(t *testing.T, h *helmCLI, s *server, ip, auditLog string) {
	ctx := context.Background()
	cs := s.clientset(t)
	agg, err := aggregatorclient.NewForConfig(s.restConfig(t, s.kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, ca := aggregatedBackend(t, ip, []byte(auth.Data["requestheader-client-ca-file"]))
	chart := writeHelmChart(t, ip, port, ca)
	// The backend's certificate names api.wardle.svc.
	const ns, rel = "wardle", "demo"
	r := helmRelease{t: t, cs: cs, agg: agg, ns: ns, name: rel, auditLog: auditLog}

	from := r.auditLines()
	h.run(t, "install", rel, chart, "-n", ns, "--create-namespace", "--wait", "--timeout", helmWait)
	r.checkRevision(h, 1)
	clusterIP := r.checkWeb(2, "hello", "")
	r.checkAPIService()
	r.checkFlundersDiscovered("false") // helm looked before the APIService was made
	r.checkHookRan(from)
	t.Logf("installed: web 2 replicas, service cluster IP %s", clusterIP)

	from = r.auditLines()
	h.run(t, "upgrade", rel, chart, "-n", ns, "--set", "replicas=3", "--set", "greeting=bonjour", "--wait", "--timeout", helmWait)
	r.checkRevision(h, 2)
	r.checkWeb(3, "bonjour", clusterIP)
	r.checkAPIService()
	r.checkFlundersDiscovered("true")
	r.checkHookRan(from)

	from = r.auditLines()
	h.run(t, "rollback", rel, "1", "-n", ns, "--wait", "--timeout", helmWait)
	r.checkRevision(h, 3)
	r.checkWeb(2, "hello", clusterIP)
	r.checkAPIService()
	r.checkFlundersDiscovered("false") // revision 1's manifest, as rendered then
	r.checkHookRan(from)

	h.run(t, "uninstall", rel, "-n", ns, "--wait", "--timeout", helmWait)
	list := []string{"list", "-n", ns, "-o", "json"}
	if h.major == "v3" {
		list = append(list, "--all") // v4 lists releases in every status by default, and has no --all
	}
	if out := strings.TrimSpace(h.run(t, list...)); out != "[]" {
		t.Fatalf("helm list after uninstall: %s", out)
	}
	r.checkGone()
}

// helmCLI is one helm binary and the environment it runs in.
type helmCLI struct {
	major, path string
	env         []string
}

// helmBinary finds Helm major (v3 or v4) where `make test-deps-helm` builds
// it, and checks that it is that major version. Without it the test is
// skipped, or fails under CI=true.
func helmBinary(t *testing.T, major string) *helmCLI {
	t.Helper()
	dir := testToolDir(t, "SQLKUBE_HELM_DIR", "")
	p := filepath.Join(dir, "helm-"+major, "helm")
	if !isExecutable(p) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("helm %s not found at %s; CI must build it (make test-deps-helm)", major, p)
		}
		t.Skipf("skipping helm %s: not found at %s (make test-deps-helm builds it)", major, p)
	}
	out, err := exec.Command(p, "version", "--template", "{{.Version}}").Output()
	if err != nil || !strings.HasPrefix(string(out), major+".") {
		t.Fatalf("%s version: %q, %v; want %s", p, out, err, major)
	}
	t.Logf("helm %s (%s)", out, p)
	return &helmCLI{major: major, path: p}
}

// helmEnv is the environment helm runs in: the server's admin
// kubeconfig, and a home, cache, configuration and data directory of its
// own in a temp dir, so that nothing of the user's is read or written.
func helmEnv(t *testing.T, kubeconfig string) []string {
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "HELM_") || strings.HasPrefix(name, "XDG_") || name == "HOME" || name == "KUBECONFIG" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "KUBECONFIG="+kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
}

// run runs helm with args and returns its stdout; a failure ends the
// test with helm's output.
func (h *helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.path, args...)
	cmd.Env = h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s %s: %v after %v\nstdout:\n%s\nstderr:\n%s", h.major, strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	}
	if args[0] != "list" && args[0] != "status" {
		t.Logf("helm %s %s: %v", h.major, args[0], time.Since(start).Round(time.Millisecond))
	}
	return stdout.String()
}
