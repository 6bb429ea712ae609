// Package cluster holds the control-plane benchmarks of `sqlkube bench`:
// it starts `sqlkube server` (and, for comparison, Kubernetes' own
// kube-controller-manager and kube-scheduler binaries) as processes on a
// temporary SQLite data directory, drives them through the API with
// client-go and measures them from the outside.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrExited is returned when a process ends before it was stopped.
var ErrExited = errors.New("cluster: process exited")

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
)

// Process is a running command whose output goes to a log file.
type Process struct {
	Name string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// Start runs bin with args; stdout and stderr go to logPath. stdout, if
// not nil, also receives each line the process writes on stdout.
func Start(name, bin string, args []string, logPath string, stdout chan<- string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = f
	p := &Process{Name: name, cmd: cmd, log: f, done: make(chan error, 1)}
	var out io.ReadCloser
	if stdout != nil {
		if out, err = cmd.StdoutPipe(); err != nil {
			f.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = f
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: start %s: %w", name, err)
	}
	if out != nil {
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Fprintln(f, sc.Text())
				select {
				case stdout <- sc.Text():
				default:
				}
			}
		}()
	}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// StartUntil runs bin with args as Start does, and waits until a line of
// its standard output contains marker. If the line does not come within
// timeout, or ctx ends first, it stops the process; if the process ends
// first, the error wraps ErrExited. Either way it says where the log is.
func StartUntil(ctx context.Context, name, bin string, args []string, logPath, marker string, timeout time.Duration) (*Process, error) {
	lines := make(chan string, 64)
	p, err := Start(name, bin, args, logPath, lines)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case line := <-lines:
			if strings.Contains(line, marker) {
				return p, nil
			}
		case err := <-p.done:
			p.done <- err
			_ = p.Stop()
			return nil, fmt.Errorf("%w: %s exited before it served (%v); its log: %s", ErrExited, name, err, logPath)
		case <-t.C:
			_ = p.Stop()
			return nil, fmt.Errorf("cluster: %s did not serve within %v; its log: %s", name, timeout, logPath)
		case <-ctx.Done():
			_ = p.Stop()
			return nil, ctx.Err()
		}
	}
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed (receives the exit error) when the process ends.
func (p *Process) Done() <-chan error { return p.done }

// Stop sends SIGTERM and waits up to 30 s, then kills.
func (p *Process) Stop() error {
	defer p.log.Close()
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("cluster: %s did not stop within %v of SIGTERM", p.Name, stopTimeout)
	}
}

// Server is a running `sqlkube server` on its own data directory.
type Server struct {
	*Process
	DataDir string
	// Kubeconfig is the admin kubeconfig the server wrote.
	Kubeconfig string
	// PprofAddress is where it serves net/http/pprof ("" if it does not).
	PprofAddress string
}

// StartServer runs `BIN server --data-dir DIR --secure-port 0 ARGS...`
// and waits until it serves. Its log is DIR/server.log.
func StartServer(ctx context.Context, bin, dir string, args ...string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args = append([]string{"server", "--data-dir", dir, "--secure-port", "0", "--disable-node",
		// Not upstream's fixed ports of the components' own endpoints,
		// which a peer (k3s) may hold.
		"--kube-controller-manager-arg=--secure-port=0", "--kube-scheduler-arg=--secure-port=0"}, args...)
	lines := make(chan string, 16)
	p, err := Start("sqlkube server", bin, args, filepath.Join(dir, "server.log"), lines)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	for {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, "sqlkube server: Kubernetes API on ") {
				return &Server{Process: p, DataDir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")}, nil
			}
		case err := <-p.done:
			p.done <- err
			return nil, fmt.Errorf("%w: sqlkube server: %v (log: %s)", ErrExited, err, filepath.Join(dir, "server.log"))
		case <-timer.C:
			_ = p.Stop()
			return nil, fmt.Errorf("cluster: sqlkube server did not serve within %v", startTimeout)
		case <-ctx.Done():
			_ = p.Stop()
			return nil, ctx.Err()
		}
	}
}

// RESTConfig is the admin client configuration, without a client-side
// rate limit.
func (s *Server) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}

// Upstream runs one of Kubernetes' own binaries (kube-controller-manager,
// kube-scheduler) from dir against s, with the flags it needs to talk to
// sqlkube and extra. Its log is s.DataDir/NAME.log.
func (s *Server) Upstream(dir, name string, extra ...string) (*Process, error) {
	args := []string{"--kubeconfig", s.Kubeconfig, "--leader-elect=false", "--secure-port=0"}
	if name == "kube-controller-manager" {
		args = append(args, "--controllers=*",
			"--service-account-private-key-file="+filepath.Join(s.DataDir, "tls", "sa.key"),
			"--root-ca-file="+filepath.Join(s.DataDir, "tls", "ca.crt"))
	}
	return Start(name, filepath.Join(dir, name), append(args, extra...), filepath.Join(s.DataDir, name+".log"), nil)
}

// sqlkubeComponent runs `sqlkube controller-manager` or `sqlkube
// scheduler` (for kube-controller-manager or kube-scheduler) from the
// server's own binary against s, with the flags Upstream gives the
// upstream binary (less --secure-port, which they do not serve).
func (s *Server) sqlkubeComponent(_, name string, extra ...string) (*Process, error) {
	sub := map[string]string{"kube-controller-manager": "controller-manager", "kube-scheduler": "scheduler"}[name]
	args := []string{sub, "--kubeconfig", s.Kubeconfig, "--leader-elect=false", "--log-level", "warn"}
	if sub == "controller-manager" {
		args = append(args, "--controllers=*",
			"--service-account-private-key-file="+filepath.Join(s.DataDir, "tls", "sa.key"),
			"--root-ca-file="+filepath.Join(s.DataDir, "tls", "ca.crt"))
	}
	return Start("sqlkube "+sub, s.cmd.Path, append(args, extra...), filepath.Join(s.DataDir, "sqlkube-"+sub+".log"), nil)
}
