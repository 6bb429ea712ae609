// Package containerd runs the container runtime a sqlkube node uses when
// none is given: containerd 2, linked into sqlkube (node/containerd/daemon,
// run as the hidden `sqlkube containerd`), started with a configuration
// sqlkube writes under its data directory, as k3s does; its runc shim and
// runc are small binaries of their own beside sqlkube (Find). It also
// imports image archives into it.
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
	// Command runs containerd; Start adds --config FILE. sqlkube's is its
	// own executable's `containerd` (default: a containerd on PATH).
	Command []string
	// Runtime is the runc shim and runc the CRI plugin runs pods with
	// (default: the shim containerd finds, and the runc on its PATH).
	Runtime Runtime
	// Log receives containerd's output (default: Dir/containerd.log).
	Log string
	// RegistryConfigDir is the CRI plugin's registry hosts directory
	// (config_path): DIR/HOST/hosts.toml says how to reach the registry
	// HOST (mirrors, plain HTTP, CAs), in containerd's format (its
	// docs/hosts.md), read at every pull. Empty: containerd's default,
	// /etc/containerd/certs.d:/etc/docker/certs.d.
	RegistryConfigDir string
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

// configTemplate is containerd 2's configuration, version 3: the CRI
// plugin's settings are split between io.containerd.cri.v1.images and
// io.containerd.cri.v1.runtime, and the sandbox image is a pinned image.
// containerd 2.4 reads it as every 2.x does, migrating it to its version
// 4 (one warning in its log); in version 4 the TTRPC socket would no
// longer follow the gRPC one, and two nodes on a host would share it.
// NRI is off: its socket is one per host (/var/run/nri/nri.sock), which
// two nodes on a host, or another containerd, would contend for, and
// sqlkube runs no NRI plugins.
var configTemplate = template.Must(template.New("config").Parse(`# Written by sqlkube; regenerated at every start.
version = 3
root = {{printf "%q" .Root}}
state = {{printf "%q" .State}}

[grpc]
  address = {{printf "%q" .Socket}}

[plugins."io.containerd.internal.v1.opt"]
  path = {{printf "%q" .Opt}}

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {{printf "%q" .SandboxImage}}
{{- if .RegistryConfigDir}}
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = {{printf "%q" .RegistryConfigDir}}
{{- end}}

[plugins."io.containerd.cri.v1.runtime"]
  # Root without CAP_SYS_RESOURCE cannot lower oom_score_adj; runc would
  # fail every sandbox otherwise.
  restrict_oom_score_adj = true
  enable_selinux = false
  # containerd 2.4 samples the CPU of every container and sandbox this
  # often, through each pod's shim, to report UsageNanoCores; its default,
  # 1s, cost 2.5% of a core with 20 idle pods. The kubelet reads stats
  # every 10 s (its housekeeping interval), so sample as often.
  stats_collect_period = "10s"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
{{- if .Runtime.Shim}}
      runtime_path = {{printf "%q" .Runtime.Shim}}
{{- end}}
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
{{- if .Runtime.Runc}}
        BinaryName = {{printf "%q" .Runtime.Runc}}
{{- end}}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{{printf "%q" .CNIBinDir}}]
    conf_dir = {{printf "%q" .CNIConfDir}}
`))

// WriteConfig writes Dir/config.toml.
func WriteConfig(o Options) (string, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	err := configTemplate.Execute(&buf, struct {
		Options
		Socket, Root, State, Opt string
	}{o, Socket(o.Dir), RootDir(o.Dir), StateDir(o.Dir), filepath.Join(o.Dir, "opt")})
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
	command := o.Command
	if len(command) == 0 {
		bin, err := exec.LookPath("containerd")
		if err != nil {
			return nil, err
		}
		command = []string{bin}
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
	cmd := exec.Command(command[0], append(command[1:], "--config", cfg)...)
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
// containerd's ctr: the command ctr (sqlkube's is its own executable's
// `ctr`; nil: a ctr on PATH).
func Import(ctx context.Context, ctr []string, endpoint, archive string) (string, error) {
	if len(ctr) == 0 {
		bin, err := exec.LookPath("ctr")
		if err != nil {
			return "", errors.New("ctr not found on PATH (it comes with containerd)")
		}
		ctr = []string{bin}
	}
	addr := strings.TrimPrefix(endpoint, "unix://")
	args := append(ctr[1:len(ctr):len(ctr)], "--address", addr, "--namespace", Namespace,
		"images", "import", "--all-platforms", archive)
	out, err := exec.CommandContext(ctx, ctr[0], args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("import %s: %v: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
