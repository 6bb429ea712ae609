package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/sqlkube/sqlkube/internal/testbin"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	startTimeout   = 60 * time.Second
	stopTimeout    = 30 * time.Second
	commandTimeout = 60 * time.Second
)

var sqlkubeBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sqlkube-apiserver-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := testbin.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	sqlkubeBin = bin
	return m.Run()
}

// kubectls returns the kubectl binaries to test: the machine's kubectl and
// the versioned ones shipped beside it (older than the server: they run
// where they pass), and the supported skew, kubectl 1.36 and 1.37, which
// `make test-deps-kubectl` builds into SQLKUBE_KUBECTL_DIR (GOPATH/bin by
// default). Without kubectl the test is skipped; under CI=true a missing
// kubectl fails it.
func kubectls(t *testing.T) map[string]string {
	t.Helper()
	ci := os.Getenv("CI") == "true"
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if ci {
			t.Fatalf("kubectl not found (%v); CI must provide it", err)
		}
		t.Skipf("skipping kubectl end-to-end tests: kubectl not found (%v)", err)
	}
	out := map[string]string{"kubectl": p}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		for _, v := range []string{"1.27", "1.33"} {
			if vp := filepath.Join(filepath.Dir(real), "kubectl."+v); isExecutable(vp) {
				out["kubectl-"+v] = vp
			}
		}
	}
	dir := testToolDir(t, "SQLKUBE_KUBECTL_DIR", "")
	for _, v := range []string{"1.36", "1.37"} {
		vp := filepath.Join(dir, "kubectl-"+v, "kubectl")
		switch {
		case isExecutable(vp):
			out["kubectl-"+v] = vp
		case ci:
			t.Fatalf("kubectl %s not found at %s; CI must build it (make test-deps-kubectl)", v, vp)
		default:
			t.Logf("kubectl %s not found at %s (make test-deps-kubectl builds it): not tested", v, vp)
		}
	}
	return out
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// server is a running `sqlkube server`.
type server struct {
	dataDir, kubeconfig, url string
	cmd                      *exec.Cmd
	stderr                   *bytes.Buffer
	stderrW                  *lockedWriter
	done                     chan error
}

// logLines are the lines of the server's log so far that contain any of
// subs, at most max of them (the last ones), for a failure's message.
func (s *server) logLines(max int, subs ...string) string {
	s.stderrW.mu.Lock()
	log := s.stderr.String()
	s.stderrW.mu.Unlock()
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(line, sub) }) {
			out = append(out, line)
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}

// startServer starts `sqlkube server` on a free port in a temp data dir
// and waits until it has written its kubeconfig and reports ready.
func startServer(t *testing.T, dataDir string) *server {
	t.Helper()
	return startCommand(t, dataDir, "server")
}

// startCommand starts `sqlkube SUBCOMMAND ARGS...` (server or apiserver)
// on a free port with its data in dataDir, and waits until it serves.
func startCommand(t testing.TB, dataDir string, args ...string) *server {
	t.Helper()
	return startCommandAt(t, "", "", dataDir, args...)
}

// startCommandIn is startCommand run in workDir, where dataDir may be
// relative (as `make run`'s default ./sqlkube-data is).
func startCommandIn(t testing.TB, workDir, dataDir string, args ...string) *server {
	t.Helper()
	return startCommandAt(t, "", workDir, dataDir, args...)
}

// startCommandNetns is startCommand in the network namespace netns (a
// name `ip netns` made; "" for the test's own), entered with nsenter.
func startCommandNetns(t testing.TB, netns, dataDir string, args ...string) *server {
	t.Helper()
	return startCommandAt(t, netns, "", dataDir, args...)
}

// startCommandAt starts sqlkube with args in the network namespace netns
// ("" for the test's own) and the working directory workDir ("" for the
// test's own).
func startCommandAt(t testing.TB, netns, workDir, dataDir string, args ...string) *server {
	t.Helper()
	if len(args) > 0 && args[0] == "server" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--disable-node") }) {
		// A real node (kubelet and containerd) only where a test asks for
		// one with --disable-node=false.
		args = append(args, "--disable-node")
	}
	if len(args) > 0 && (args[0] == "server" || args[0] == "apiserver") &&
		!slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "--disable-dns") || strings.HasPrefix(a, "--cluster-dns-port")
		}) {
		// Cluster DNS (CoreDNS on a port of its own) only where a test
		// asks for it.
		args = append(args, "--disable-dns")
	}
	args = append(args, "--data-dir", dataDir, "--secure-port", "0", "--log-format", "json")
	cmd := sqlkubeCommand(netns, args...)
	cmd.Dir = workDir
	if !filepath.IsAbs(dataDir) {
		dataDir = filepath.Join(workDir, dataDir)
	}
	s := launch(t, cmd, dataDir)
	t.Cleanup(func() { s.stop(t) })
	return s
}

// launch starts cmd, a `sqlkube server` or `apiserver` whose data
// directory is dataDir, and waits until it says where it serves the API.
// A process that does not get there is killed, and the test fails.
func launch(t testing.TB, cmd *exec.Cmd, dataDir string) *server {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{dataDir: dataDir, kubeconfig: filepath.Join(dataDir, "kubeconfig"), cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	s.stderrW = &lockedWriter{w: s.stderr}
	cmd.Stderr = s.stderrW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "sqlkube server: Kubernetes API on "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { s.done <- cmd.Wait() }()
	select {
	case s.url = <-urls:
		return s
	case err := <-s.done:
		t.Fatalf("%s exited at start: %v\n%s", cmd.Args, err, s.stderr)
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-s.done
		t.Fatalf("%s did not start within %v\n%s", cmd.Args, startTimeout, s.stderr)
	}
	return nil
}

// sqlkubeCommand runs sqlkube in the network namespace netns ("": the
// test's own), with nsenter, which enters nothing else.
func sqlkubeCommand(netns string, args ...string) *exec.Cmd {
	args = componentPortsOff(args)
	if netns == "" {
		return exec.Command(sqlkubeBin, args...)
	}
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + netns, "--", sqlkubeBin}, args...)...)
}

// componentPortsOff turns off the own endpoints of a `sqlkube server`'s
// in-process controller manager and scheduler (upstream's fixed ports
// 10257 and 10259), which servers run side by side on this host would
// fight over, unless args set their ports.
func componentPortsOff(args []string) []string {
	if len(args) == 0 || args[0] != "server" || slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "-arg=--secure-port") }) {
		return args
	}
	return append(slices.Clone(args), "--kube-controller-manager-arg=--secure-port=0", "--kube-scheduler-arg=--secure-port=0")
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t testing.TB) {
	t.Helper()
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	start := time.Now()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("sqlkube server exited with %v after SIGTERM\n%s", err, s.stderr)
		}
		t.Logf("sqlkube exited %s after SIGTERM", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("sqlkube server did not stop within %v of SIGTERM", stopTimeout)
	}
}

// kubectl runs one kubectl command against s and returns its stdout.
func (s *server) kubectl(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (s *server) mustKubectl(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := s.kubectl(t, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlLines starts a long-running kubectl command (get -w) against s
// and returns its output lines; the process is killed when t ends.
func (s *server) kubectlLines(t *testing.T, bin string, args ...string) *bufio.Scanner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "HOME="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	return bufio.NewScanner(out)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// testToolDir is where `make test-deps-*` builds a test tool: the
// directory env names, or GOPATH/bin/sub (GOPATH/bin for sub "").
func testToolDir(t *testing.T, env, sub string) string {
	t.Helper()
	if dir := os.Getenv(env); dir != "" {
		return dir
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env GOPATH: %v", err)
	}
	return filepath.Join(filepath.SplitList(strings.TrimSpace(string(out)))[0], "bin", sub)
}
