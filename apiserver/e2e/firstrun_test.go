package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// firstRunTimeout bounds `make run` in a fresh tree up to the API: the
// build of sqlkube there (its own packages compile again, at a new path;
// the dependencies come from the build cache) and the server's start.
const firstRunTimeout = 8 * time.Minute

// TestReadme_FirstRun runs the README's first command, `make run`, as a
// newcomer would on a fresh machine that cannot run a node: in a copy of
// this checkout's files (a fresh clone has no bin/), with no libseccomp
// headers (SECCOMP_HEADER names a file that does not exist), no runc or
// containerd 2 shim anywhere (none is built, and a runc on PATH is
// hidden: hidingRunc), and nothing installed (NODE_DEPS=skip: what a user
// without root gets). The build must still give sqlkube and one line on
// what the node needs; the server must serve the API, say in one line
// that it runs without a node, and a Deployment on simulated nodes must
// roll out. It is also the quiet-start check for a start without a node:
// no warning or error in its first 30 s but the allow-list's.
//
// What the test substitutes, as TestReadme_QuickStart does: a free port
// for the API (--secure-port=0) and no cluster DNS (its port 10053 is
// fixed), plus --fake-nodes=2 for the Deployment and JSON logs to read.
func TestReadme_FirstRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sqlkube in a fresh tree")
	}
	kubectl := kubectlPath(t)
	tree := copyCheckout(t)
	dataDir := filepath.Join(tree, "sqlkube-data")

	ctx, cancel := context.WithTimeout(context.Background(), firstRunTimeout)
	defer cancel()
	argv := hidingRunc(t, []string{"make", "run", "NODE_DEPS=skip",
		"SECCOMP_HEADER=" + filepath.Join(t.TempDir(), "seccomp.h"),
		"RUN_ARGS=--secure-port=0 --disable-dns --fake-nodes=2 --log-format=json"})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = tree
	// The environment is the test's: the build uses its module and build
	// caches, as a newcomer's second build would.
	// make runs the server as its child: the test stops both by their
	// process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	errW := &lockedWriter{w: &stderr}
	cmd.Stderr = errW
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out bytes.Buffer
	served := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "sqlkube server: Kubernetes API on ") {
				close(served)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	done := make(chan error, 1)
	go func() { <-copied; done <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("make run did not stop within %v of SIGTERM", stopTimeout)
		}
	}
	t.Cleanup(stop)
	logs := func() string {
		errW.mu.Lock()
		defer errW.mu.Unlock()
		return stderr.String()
	}
	select {
	case <-served:
	case err := <-done:
		stopped = true
		t.Fatalf("make run exited before serving: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), logs())
	case <-ctx.Done():
		t.Fatalf("make run did not serve within %v\nstderr:\n%s", firstRunTimeout, logs())
	}
	t.Logf("make run served the API %v after it started (build included)", time.Since(start).Round(time.Second))
	start = time.Now() // the server's start, near enough: the log's window begins here
	s := &server{dataDir: dataDir, kubeconfig: filepath.Join(dataDir, "kubeconfig")}

	if got := s.mustKubectl(t, kubectl, "get", "ns", "-o", "name"); !strings.Contains(got, "namespace/kube-system") {
		t.Errorf("kubectl get ns: %q", got)
	}
	s.waitKubectl(t, kubectl, "fake-0=True fake-1=True", "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
	s.mustKubectl(t, kubectl, "create", "deployment", "web", "--image=nginx", "--replicas=2")
	s.mustKubectl(t, kubectl, "rollout", "status", "deployment/web", "--timeout=50s")

	// The server's log: let its first 30 s pass.
	if d := quietStartWindow - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	log := logs()
	stop()

	// make's one line (on its standard output), and the server's.
	if !strings.Contains(out.String(), "make: the node's runc is not built: it needs libseccomp's headers (Debian: apt-get install libseccomp-dev") {
		t.Errorf("make run did not say what the node needs:\n%s", out.String())
	}
	if n := strings.Count(log, "no node for this host"); n != 1 {
		t.Errorf("the server said %d times that it runs without a node, want once:\n%s", n, log)
	}
	for _, want := range []string{"runc not found", "make runtime", "libseccomp-dev"} {
		if !strings.Contains(log, want) {
			t.Errorf("the server's line on the node does not say %q:\n%s", want, log)
		}
	}
	for _, l := range unexpectedWarnings(serverLogLines(log)) {
		t.Errorf("make run logged, not on the quiet-start allow-list: %s", l)
	}
}

// copyCheckout copies this checkout's files (tracked, with their working
// tree's content, as a fresh clone of this tree would have them; no
// bin/, no data directory) to a new directory and returns it.
func copyCheckout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, to); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// hidingRunc is argv run so that no runc on PATH can run: where PATH
// holds one (Debian's runc comes with docker.io, in /usr/sbin with a
// link in /usr/bin, beside the build's tools), argv runs in a mount
// namespace of its own in which an empty file without execute bits is
// bound over each. The mounts end with the namespace's last process.
// That needs root: elsewhere the test skips (fails under CI=true).
func hidingRunc(t *testing.T, argv []string) []string {
	t.Helper()
	var runcs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p, err := filepath.EvalSymlinks(filepath.Join(d, "runc"))
		if err != nil || !isExecutable(p) || slices.Contains(runcs, p) {
			continue
		}
		runcs = append(runcs, p)
	}
	if len(runcs) == 0 {
		return argv
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("runc is on PATH (%v): hiding it from make run needs root", runcs)
		}
		t.Skipf("runc is on PATH (%v): hiding it from make run needs root", runcs)
	}
	empty := filepath.Join(t.TempDir(), "no-runc")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const script = `set -e; e=$1; shift; while [ "$1" != -- ]; do mount --bind "$e" "$1"; shift; done; shift; exec "$@"`
	out := append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", empty}, runcs...)
	return append(append(out, "--"), argv...)
}
