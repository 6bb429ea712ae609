package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sqlkube/sqlkube/internal/testbin"
	"github.com/sqlkube/sqlkube/internal/testport"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Deadlines of the harness. They only bound waits for conditions; no test
// sleeps for a fixed time.
const (
	startTimeout   = 60 * time.Second // a server process until it serves
	stopTimeout    = 30 * time.Second // a server process after SIGTERM
	commandTimeout = 30 * time.Second // one etcdctl run
	waitFor        = 20 * time.Second // an awaited condition or watch output
)

// sqlkubeBin is the binary TestMain builds.
var sqlkubeBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sqlkube-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
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

// etcdctlPath finds etcdctl. Without it the test is skipped, or fails under
// CI=true.
func etcdctlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("etcdctl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcdctl not found (%v); CI must provide it (Debian: apt-get install etcd-client)", err)
		}
		t.Skipf("skipping etcdctl end-to-end test: etcdctl not found (%v); install etcd-client (etcdctl 3.4) to run it", err)
	}
	return p
}

// logWriter keeps a process's output and notices the line that says the
// etcd API is served.
type logWriter struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	ready   chan struct{}
	once    sync.Once
}

func newLogWriter() *logWriter { return &logWriter{ready: make(chan struct{})} }

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		var entry struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(w.partial[:i], &entry) == nil && entry.Message == "serving etcd API" {
			w.once.Do(func() { close(w.ready) })
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// server is one `sqlkube etcd` process.
type server struct {
	dsn      string
	addr     string // host:port of the etcd API
	endpoint string // addr as etcdctl is given it: with https:// under TLS
	metrics  string // host:port of /metrics, if served
	etcdctl  string
	ctlArgs  []string // flags every etcdctl run gets, such as TLS files
	cmd      *exec.Cmd
	log      *logWriter
	done     chan struct{} // closed when the process has exited
	stopped  bool
}

// serverConfig says how to start `sqlkube etcd`. Only dsn is required.
type serverConfig struct {
	dsn     string
	args    []string // more flags for sqlkube etcd, such as TLS files
	tls     bool     // the API is served over TLS: etcdctl dials https://
	ctlArgs []string // flags for every etcdctl run, such as --cacert
	metrics bool     // serve /metrics on a free port
	// listenHost is the host sqlkube listens on (default 127.0.0.1; clients
	// dial 127.0.0.1 whatever it is).
	listenHost string
}

// freePort returns a port that was free a moment ago. Another process may
// take it before sqlkube binds it; startServer retries then.
func freePort(t *testing.T) string { return strconv.Itoa(testport.Free(t)) }

// startServer runs `sqlkube etcd` on dsn and a free port, waits until
// etcdctl finds it healthy, and stops it when the test ends (asserting a
// clean exit).
func startServer(t *testing.T, dsn string) *server {
	t.Helper()
	return startServerWith(t, serverConfig{dsn: dsn})
}

// startServerWith is startServer with more flags.
func startServerWith(t *testing.T, cfg serverConfig) *server {
	t.Helper()
	ctl := etcdctlPath(t)
	const attempts = 5
	for attempt := 1; ; attempt++ {
		s := &server{dsn: cfg.dsn, etcdctl: ctl, ctlArgs: cfg.ctlArgs, addr: net.JoinHostPort("127.0.0.1", freePort(t)),
			log: newLogWriter(), done: make(chan struct{})}
		s.endpoint = s.addr
		if cfg.tls {
			s.endpoint = "https://" + s.addr
		}
		listenAddr := s.addr
		if cfg.listenHost != "" {
			_, port, _ := net.SplitHostPort(s.addr)
			listenAddr = net.JoinHostPort(cfg.listenHost, port)
		}
		args := []string{"etcd", "--log-format=json", "--listen-address=" + listenAddr,
			"--datastore=" + cfg.dsn, "--name=e2e", "--compaction-interval=0"}
		if cfg.metrics {
			s.metrics = net.JoinHostPort("127.0.0.1", freePort(t))
			args = append(args, "--metrics-address="+s.metrics)
		}
		s.cmd = exec.Command(sqlkubeBin, append(args, cfg.args...)...)
		s.cmd.Stdout = s.log
		s.cmd.Stderr = s.log
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("start sqlkube etcd: %v", err)
		}
		go func() {
			_ = s.cmd.Wait()
			close(s.done)
		}()
		select {
		case <-s.log.ready:
		case <-s.done:
			if attempt < attempts && strings.Contains(s.log.String(), "address already in use") {
				t.Logf("a port of %s was taken before sqlkube bound it; retrying", s.addr)
				continue
			}
			t.Fatalf("sqlkube etcd exited with %v before serving:\n%s", s.cmd.ProcessState, s.log)
		case <-time.After(startTimeout):
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Fatalf("sqlkube etcd did not serve within %v:\n%s", startTimeout, s.log)
		}
		t.Cleanup(func() { s.stop(t) })
		s.awaitHealthy(t)
		return s
	}
}

// awaitHealthy polls `etcdctl endpoint health` until it succeeds.
func (s *server) awaitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		out, errOut, err := s.run(t, "", "endpoint", "health")
		if err == nil {
			if got := out + errOut; !strings.Contains(got, s.endpoint+" is healthy") {
				t.Fatalf("endpoint health succeeded but says %q", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sqlkube on %s not healthy within %v: %v\n%s\nserver log:\n%s", s.addr, waitFor, err, errOut, s.log)
		}
		select {
		case <-s.done:
			t.Fatalf("sqlkube exited while waiting for health:\n%s", s.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, asserts that the process exits 0 in time, and
// returns how long it took. It is safe to call more than once.
func (s *server) stop(t *testing.T) time.Duration {
	t.Helper()
	if s.stopped {
		return 0
	}
	s.stopped = true
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("SIGTERM sqlkube: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("sqlkube did not exit within %v of SIGTERM:\n%s", stopTimeout, s.log)
		return time.Since(start)
	}
	took := time.Since(start)
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("sqlkube exited with %v after SIGTERM, want exit status 0:\n%s", s.cmd.ProcessState, s.log)
	}
	return took
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if s.stopped {
		t.Fatal("kill: sqlkube already stopped")
	}
	s.stopped = true
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL sqlkube: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		t.Fatalf("sqlkube did not exit within %v of SIGKILL", stopTimeout)
	}
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("sqlkube ended with %v, want killed by SIGKILL:\n%s", s.cmd.ProcessState, s.log)
	}
}

// ctlCommand builds an etcdctl command against the server.
func (s *server) ctlCommand(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--endpoints=" + s.endpoint, "--dial-timeout=5s", "--command-timeout=20s"}, s.ctlArgs...)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, s.etcdctl, full...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	return cmd
}

// run runs etcdctl with stdin and returns what it printed.
func (s *server) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := s.ctlCommand(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("etcdctl %s: no answer within %v\nstderr: %s", strings.Join(args, " "), commandTimeout, errOut.String())
	}
	return out.String(), errOut.String(), err
}

// ctl runs etcdctl, fails the test unless it succeeds, and returns stdout.
func (s *server) ctl(t *testing.T, args ...string) string {
	t.Helper()
	return s.ctlStdin(t, "", args...)
}

// ctlStdin is ctl with input.
func (s *server) ctlStdin(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := s.run(t, stdin, args...)
	if err != nil {
		t.Fatalf("etcdctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// ctlJSON runs etcdctl with -w json and decodes its output into v.
func (s *server) ctlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := s.ctl(t, append(args, "-w", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("etcdctl %s -w json: decode %q: %v", strings.Join(args, " "), out, err)
	}
}

// ctlFail runs etcdctl, fails the test if it succeeds, and returns stderr.
func (s *server) ctlFail(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := s.run(t, "", args...)
	if err == nil {
		t.Fatalf("etcdctl %s succeeded, want an error\nstdout: %s", strings.Join(args, " "), out)
	}
	return errOut
}

// wantOutput compares etcdctl output with the expected lines.
func wantOutput(t *testing.T, what, got string, want ...string) {
	t.Helper()
	w := strings.Join(want, "\n")
	if len(want) > 0 {
		w += "\n"
	}
	if got != w {
		t.Errorf("%s:\ngot:\n%s\nwant:\n%s", what, got, w)
	}
}

// revision reads the server's current revision.
func (s *server) revision(t *testing.T) int64 {
	t.Helper()
	var resp struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
	}
	s.ctlJSON(t, &resp, "get", "revision-probe")
	return resp.Header.Revision
}

// watchProc is a background etcdctl command that prints until stopped,
// such as `etcdctl watch`.
type watchProc struct {
	cmd    *exec.Cmd
	lines  chan string
	quit   chan struct{}
	done   chan struct{} // closed when the process has exited
	stderr *logWriter
}

// startWatch runs `etcdctl watch args…` until the test ends.
func (s *server) startWatch(t *testing.T, args ...string) *watchProc {
	t.Helper()
	return s.startCtl(t, append([]string{"watch"}, args...)...)
}

// startCtl runs `etcdctl args…` in the background until the test ends.
func (s *server) startCtl(t *testing.T, args ...string) *watchProc {
	t.Helper()
	cmd := s.ctlCommand(context.Background(), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("etcdctl watch: %v", err)
	}
	w := &watchProc{cmd: cmd, lines: make(chan string, 1024), quit: make(chan struct{}), done: make(chan struct{}), stderr: newLogWriter()}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcdctl watch: %v", err)
	}
	go w.read(stdout)
	t.Cleanup(w.stop)
	return w
}

func (w *watchProc) read(r io.Reader) {
	defer close(w.done)
	defer close(w.lines)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	for sc.Scan() {
		select {
		case w.lines <- sc.Text():
		case <-w.quit:
			_, _ = io.Copy(io.Discard, r)
			_ = w.cmd.Wait()
			return
		}
	}
	_ = w.cmd.Wait()
}

// stop ends the watch process and waits for it.
func (w *watchProc) stop() {
	select {
	case <-w.quit:
		return
	default:
	}
	close(w.quit)
	_ = w.cmd.Process.Kill()
	<-w.done
}

// next returns the next line the watch printed, failing the test at the
// deadline or when the watch ends.
func (w *watchProc) next(t *testing.T, deadline time.Time) string {
	t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			t.Fatalf("etcdctl watch ended early:\n%s", w.stderr)
		}
		return line
	case <-time.After(time.Until(deadline)):
		t.Fatalf("etcdctl watch printed nothing more within %v", waitFor)
		return ""
	}
}

// expect reads len(want) lines and compares them with want.
func (w *watchProc) expect(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	got := make([]string, 0, len(want))
	for range want {
		got = append(got, w.next(t, deadline))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("etcdctl watch printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// leaseHex formats a lease ID as etcdctl prints it.
func leaseHex(id int64) string { return fmt.Sprintf("%016x", id) }

// parseLeaseHex reads a lease ID as etcdctl prints it.
func parseLeaseHex(t *testing.T, s string) int64 {
	t.Helper()
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("lease ID %q: %v", s, err)
	}
	return int64(id)
}

// sqliteDSN is a new SQLite datastore in the test's temporary directory,
// for tests whose subject does not depend on the backend.
func sqliteDSN(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "state.db")
}

// result is what a sqlkube command that runs to its end did.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// runSqlkube runs the sqlkube binary to its end, failing the test if it is
// still running after commandTimeout.
func runSqlkube(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, sqlkubeBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("sqlkube %s: still running after %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), commandTimeout, r.stdout, r.stderr)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("sqlkube %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// sqlkubeOK runs sqlkube, fails the test unless it exits 0, and returns
// stdout.
func sqlkubeOK(t *testing.T, args ...string) string {
	t.Helper()
	r := runSqlkube(t, args...)
	if r.code != 0 {
		t.Fatalf("sqlkube %s: exit status %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// failFast is how soon a command that cannot start must give up. Generous:
// the machine may be busy.
const failFast = 15 * time.Second

// wantStartError runs sqlkube and asserts that it fails within failFast
// with exit status 1, prints nothing on stdout and exactly one line on
// stderr, "sqlkube: " followed by an error containing each of want.
func wantStartError(t *testing.T, args []string, want ...string) {
	t.Helper()
	r := runSqlkube(t, args...)
	cmdline := "sqlkube " + strings.Join(args, " ")
	if r.code != 1 {
		t.Errorf("%s: exit status %d, want 1\nstderr: %s", cmdline, r.code, r.stderr)
	}
	if r.took > failFast {
		t.Errorf("%s: failed after %v, want within %v", cmdline, r.took, failFast)
	}
	if r.stdout != "" {
		t.Errorf("%s: printed %q on stdout, want nothing", cmdline, r.stdout)
	}
	line, ok := strings.CutSuffix(r.stderr, "\n")
	if !ok || strings.Contains(line, "\n") || !strings.HasPrefix(line, "sqlkube: ") {
		t.Errorf("%s: stderr %q, want one line \"sqlkube: <error>\"", cmdline, r.stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("%s: error %q does not mention %q", cmdline, line, w)
		}
	}
}
