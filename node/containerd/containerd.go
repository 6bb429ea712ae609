// Package containerd runs the container runtime a sqlkube node uses when
// none is given: Debian's (or any) containerd found on PATH, started with a
// configuration sqlkube writes under its data directory, as k3s does. It
// also imports image archives into it.
package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Namespace is containerd's namespace of the CRI plugin: the images and
// containers the kubelet sees.
const Namespace = "k8s.io"

// Options shape the containerd sqlkube starts.
type Options struct {
	// Dir holds its configuration, root, state and socket.
	Dir string
	// SandboxImage is the pause image's name.
	SandboxImage string
	// CNIBinDir and CNIConfDir are where the CRI plugin finds the CNI
	// plugins and the network configuration.
	CNIBinDir, CNIConfDir string
	// Binary is containerd's path (default: found on PATH).
	Binary string
	// Log receives containerd's output (default: Dir/containerd.log).
	Log string
}

// Paths under an Options.Dir.
func Socket(dir string) string { return filepath.Join(dir, "containerd.sock") }

// ConfigFile is the configuration Start writes; RootDir and StateDir are
// containerd's root (images, snapshots, its database) and state (running
// tasks' bundles, the CRI plugin's sandbox files) directories.
func ConfigFile(dir string) string { return filepath.Join(dir, "config.toml") }
func RootDir(dir string) string    { return filepath.Join(dir, "root") }
func StateDir(dir string) string   { return filepath.Join(dir, "state") }

// RuncRoot is where the runc shim (io.containerd.runc.v2) has runc keep
// its containers' state, RuncRoot/NAMESPACE/ID: the shim's default, which
// sqlkube's configuration keeps. It is outside Dir, and shared with any
// other containerd on the host.
const RuncRoot = "/run/containerd/runc"

// Endpoint is the CRI endpoint of the containerd started in dir.
func Endpoint(dir string) string { return "unix://" + Socket(dir) }

// Missing explains what is missing to run containerd here (nil: nothing).
func Missing() error {
	var miss []string
	for _, bin := range []string{"containerd", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			miss = append(miss, bin)
		}
	}
	if len(miss) > 0 {
		return fmt.Errorf("%s not found on PATH (Debian: apt-get install containerd runc containernetworking-plugins)", strings.Join(miss, " and "))
	}
	if os.Geteuid() != 0 {
		return errors.New("running containers needs root (sqlkube runs containerd and the kubelet itself)")
	}
	return nil
}

var configTemplate = template.Must(template.New("config").Parse(`# Written by sqlkube; regenerated at every start.
version = 2
root = "{{.Root}}"
state = "{{.State}}"

[grpc]
  address = "{{.Socket}}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  # Root without CAP_SYS_RESOURCE cannot lower oom_score_adj; runc would
  # fail every sandbox otherwise.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.CNIConfDir}}"
`))

// WriteConfig writes Dir/config.toml.
func WriteConfig(o Options) (string, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	err := configTemplate.Execute(&buf, struct {
		Options
		Socket, Root, State string
	}{o, Socket(o.Dir), RootDir(o.Dir), StateDir(o.Dir)})
	if err != nil {
		return "", err
	}
	p := ConfigFile(o.Dir)
	return p, os.WriteFile(p, buf.Bytes(), 0o600)
}

// Process is a running containerd.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// Endpoint is its CRI endpoint (unix://...).
	Endpoint string
}

// Start writes the configuration and starts containerd; it returns once
// the socket accepts connections. Containers outlive it: their shims are
// processes of their own, and a later containerd on the same Dir finds them.
func Start(ctx context.Context, o Options) (*Process, error) {
	if len(Socket(o.Dir)) > 100 {
		return nil, fmt.Errorf("containerd socket path %s is too long for a unix socket: use a shorter data directory", Socket(o.Dir))
	}
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("containerd"); err != nil {
			return nil, err
		}
	}
	cfg, err := WriteConfig(o)
	if err != nil {
		return nil, err
	}
	logPath := o.Log
	if logPath == "" {
		logPath = filepath.Join(o.Dir, "containerd.log")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	_ = os.Remove(Socket(o.Dir))
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a terminal's ^C reaches sqlkube, which
	// stops containerd itself; and it dies with sqlkube.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), Endpoint: Endpoint(o.Dir)}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(30 * time.Second)
	for {
		c, err := net.Dial("unix", Socket(o.Dir))
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("containerd exited (%v); its log: %s", p.err, logPath)
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-timeout:
			p.Stop()
			return nil, fmt.Errorf("containerd did not open %s within 30s; its log: %s", Socket(o.Dir), logPath)
		case <-tick.C:
		}
	}
}

// Done is closed when containerd has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop stops containerd (SIGTERM, then SIGKILL after 10 s) and waits.
// Running containers keep running.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Import loads an image archive (OCI layout or docker save) into the
// containerd at endpoint (unix://PATH or PATH), in the CRI namespace, with
// containerd's ctr.
func Import(ctx context.Context, endpoint, archive string) (string, error) {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return "", errors.New("ctr not found on PATH (it comes with containerd)")
	}
	addr := strings.TrimPrefix(endpoint, "unix://")
	out, err := exec.CommandContext(ctx, ctr, "--address", addr, "--namespace", Namespace,
		"images", "import", "--all-platforms", archive).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("import %s: %v: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
