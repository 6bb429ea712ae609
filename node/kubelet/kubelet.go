// Package kubelet runs Kubernetes' own kubelet (k8s.io/kubernetes/cmd/kubelet/app)
// inside sqlkube, over a CRI runtime (the containerd of package
// node/containerd, or one the user names), configured as a node on this
// host needs it: cgroupfs with the per-QoS hierarchy under a cgroup of
// the node's own (CgroupRoot), x509 client certificates and webhook
// authorization towards the API server, and every directory it owns under
// the node's data directory where the kubelet lets us choose.
//
// It runs in a child process (Run), not in the node agent's: the kubelet
// ends its process on some failures (os.Exit when cAdvisor, the container
// manager, its modules or its HTTPS endpoint fail; klog.Fatal when the
// CSI plugin cannot initialise CSINode; exit on an expired client
// certificate; a panic in its main sync loop, which nothing recovers).
// Run is the supervisor that starts it again, and the node agent (which
// may be `sqlkube server`, the whole control plane) never ends with it.
// The child shares nothing with the agent but files: its Options (as
// JSON, OptionsFile), the credentials they name, and the runtime's
// socket. Containers are the runtime's, so they outlive either process.
package kubelet

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"

	"github.com/sqlkube/sqlkube/internal/childproc"
)

// DefaultPort is the kubelet's HTTPS port (logs, exec, port-forward, metrics).
const DefaultPort = 10250

// Options configure the embedded kubelet.
type Options struct {
	// Dir is the node's data directory: the kubelet's root dir, its
	// static pod manifests and pod logs go under it.
	Dir string
	// NodeName registers the node (default: the host name).
	NodeName string
	// NodeIP is the node's InternalIP (default: the kubelet's own pick).
	NodeIP string
	// Kubeconfig is the node's credential towards the API server. With
	// BootstrapKubeconfig (a bootstrap token), the kubelet writes it
	// itself once its client certificate is issued (TLS bootstrap).
	Kubeconfig          string
	BootstrapKubeconfig string
	// ServerTLSBootstrap has the kubelet ask the cluster for its serving
	// certificate (a kubelet-serving CSR) instead of TLSCertFile.
	ServerTLSBootstrap bool
	// ClientCAFile verifies the API server's (and other callers') client
	// certificates on the kubelet's port.
	ClientCAFile string
	// TLSCertFile and TLSKeyFile serve the kubelet's port.
	TLSCertFile, TLSKeyFile string
	// RuntimeEndpoint is the CRI endpoint (unix://...).
	RuntimeEndpoint string
	// Port is the kubelet's HTTPS port (default DefaultPort).
	Port int
	// PodCIDR is given to the runtime for the pod network (optional).
	PodCIDR string
	// ClusterDNS and ClusterDomain go into pods' resolv.conf.
	ClusterDNS    []string
	ClusterDomain string
	// NodeLabels are added to the node when it registers.
	NodeLabels map[string]string
	// ExtraArgs are kubelet flags, applied last (--kubelet-arg).
	ExtraArgs []string

	// Command is how Run starts the kubelet: a program and its first
	// arguments, to which Run appends OptionsFile(Dir). The program must
	// pass the Options in that file (ReadOptions) to RunInProcess
	// (sqlkube's hidden `kubelet` command does) and write its logs as
	// JSON lines (zerolog's) to standard error.
	Command []string `json:"-"`
	// Log gets the child's log lines (and what else it writes); in the
	// child (RunInProcess), its own logger, for the flags' notices.
	Log zerolog.Logger `json:"-"`
}

// portFree reports an error when the kubelet could not listen on
// address:port: it would find out after it started, in a goroutine, and
// end its process.
func portFree(address string, port int32) error {
	l, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("kubelet: its port: %w", err)
	}
	return l.Close()
}

// Paths under Options.Dir.
func RootDir(dir string) string      { return filepath.Join(dir, "kubelet") }
func ManifestsDir(dir string) string { return filepath.Join(dir, "pod-manifests") }
func PodLogsDir(dir string) string   { return filepath.Join(dir, "logs", "pods") }

// Server builds the kubelet's flags and configuration from o, as the
// kubelet command line would, and validates them. What the flags say of
// themselves (deprecations) is left to the kubelet's process to print.
func Server(o Options) (*options.KubeletServer, error) { return server(o, io.Discard) }

// server is Server writing the flags' notices to flagOut.
func server(o Options, flagOut io.Writer) (*options.KubeletServer, error) {
	if o.Dir == "" || o.Kubeconfig == "" || o.RuntimeEndpoint == "" {
		return nil, fmt.Errorf("kubelet: Dir, Kubeconfig and RuntimeEndpoint are required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{RootDir(dir), ManifestsDir(dir), PodLogsDir(dir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	kf := options.NewKubeletFlags()
	kc, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, err
	}
	kf.KubeConfig = o.Kubeconfig
	kf.BootstrapKubeconfig = o.BootstrapKubeconfig
	if o.BootstrapKubeconfig != "" {
		kc.RotateCertificates = true
	}
	kc.ServerTLSBootstrap = o.ServerTLSBootstrap
	kf.RootDirectory = RootDir(dir)
	kf.CertDirectory = filepath.Join(RootDir(dir), "pki")
	kf.HostnameOverride = o.NodeName
	kf.NodeIP = o.NodeIP
	kf.NodeLabels = map[string]string{}
	for k, v := range o.NodeLabels {
		kf.NodeLabels[k] = v
	}

	port := o.Port
	if port == 0 {
		port = DefaultPort
	}
	kc.Port = int32(port)
	kc.ReadOnlyPort = 0
	kc.HealthzPort = 0 // several test nodes share one host; /healthz is on Port too
	kc.Address = "0.0.0.0"
	kc.ContainerRuntimeEndpoint = o.RuntimeEndpoint
	kc.StaticPodPath = ManifestsDir(dir)
	kc.PodLogsDir = PodLogsDir(dir)
	kc.PodCIDR = o.PodCIDR
	kc.ClusterDNS = o.ClusterDNS
	kc.ClusterDomain = o.ClusterDomain
	kc.TLSCertFile, kc.TLSPrivateKeyFile = o.TLSCertFile, o.TLSKeyFile
	kc.Authentication.Anonymous.Enabled = false
	kc.Authentication.Webhook.Enabled = true
	kc.Authentication.Webhook.CacheTTL = metav1.Duration{Duration: 2 * time.Minute}
	kc.Authentication.X509.ClientCAFile = o.ClientCAFile
	kc.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
	kc.Authorization.Webhook.CacheAuthorizedTTL = metav1.Duration{Duration: 5 * time.Minute}
	kc.Authorization.Webhook.CacheUnauthorizedTTL = metav1.Duration{Duration: 30 * time.Second}
	// What a host without systemd and with a cgroup tree shared with
	// other nodes allows: the cgroupfs driver, the kubelet's per-QoS
	// hierarchy with pod cgroups (upstream's default: the kubelet sets
	// pods' limits and resizes pods in place through them; without them
	// its in-place resize panics in the pod's worker) under a root of
	// the node's own, no node-allocatable enforcement, and swap
	// tolerated.
	kc.CgroupDriver = "cgroupfs"
	kc.CgroupsPerQOS = true
	kc.CgroupRoot = CgroupRoot(dir)
	kc.EnforceNodeAllocatable = []string{}
	kc.FailSwapOn = false
	// Since 1.35 the kubelet refuses cgroup v1 hosts by default; it still
	// runs on them, and many hosts are still v1, so on one it is let run
	// (Run says so once; --kubelet-arg=--fail-cgroupv1 restores upstream's
	// refusal). cgroup v2 hosts keep upstream's default.
	if !cgroupsV2() {
		kc.FailCgroupV1 = false
	}
	kc.ResolverConfig = "/etc/resolv.conf"
	kc.SerializeImagePulls = false
	// Node status as kubelets report it now: the Lease every 10 s, the
	// status on change or every 5 minutes.
	kc.NodeStatusReportFrequency = metav1.Duration{Duration: 5 * time.Minute}

	if len(o.ExtraArgs) > 0 {
		fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
		fs.SetOutput(flagOut)
		fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
		kf.AddFlags(fs)
		options.AddKubeletConfigFlags(fs, kc)
		if err := fs.Parse(o.ExtraArgs); err != nil {
			return nil, fmt.Errorf("--kubelet-arg: %w", err)
		}
		if fs.NArg() > 0 {
			return nil, fmt.Errorf("--kubelet-arg: unexpected argument %q", fs.Arg(0))
		}
	}
	// The kubelet's --feature-gates are checked against a copy of this
	// process's gates: they are the kubelet process's (RunInProcess sets
	// them there), never the node agent's.
	gates := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	if err := gates.SetFromMap(kc.FeatureGates); err != nil {
		return nil, fmt.Errorf("kubelet feature gates: %w", err)
	}
	if err := options.ValidateKubeletFlags(kf); err != nil {
		return nil, fmt.Errorf("kubelet flags: %w", err)
	}
	if err := validation.ValidateKubeletConfiguration(kc, gates); err != nil {
		return nil, fmt.Errorf("kubelet configuration: %w", err)
	}
	return &options.KubeletServer{KubeletFlags: *kf, KubeletConfiguration: *kc}, nil
}

// OptionsFile is where Run writes the Options its child reads, under
// Options.Dir.
func OptionsFile(dir string) string { return filepath.Join(dir, "kubelet.json") }

// WriteOptions writes o to path as JSON (Command and Log are not written).
func WriteOptions(path string, o Options) error {
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadOptions reads what WriteOptions wrote.
func ReadOptions(path string) (Options, error) {
	var o Options
	b, err := os.ReadFile(path)
	if err != nil {
		return o, err
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}

// portWait is how long Run waits for the kubelet's port to be free: a
// kubelet child of a node agent that was killed gets SIGTERM as its
// parent dies, and may still be stopping when the agent starts again.
var portWait = childproc.DefaultStopTimeout

// Run runs the kubelet in a child process (o.Command) until ctx ends, and
// starts it again whenever it exits (a minute apart at most); its logs go
// to o.Log. It returns an error only when o is invalid or the kubelet's
// port stays taken; otherwise it returns once ctx has ended and the child
// has stopped. When ctx ends the child gets SIGTERM, and it gets SIGTERM
// too if this process dies first. Pods' containers belong to the runtime
// and outlive the child; the next one takes them over.
func Run(ctx context.Context, o Options) error {
	if len(o.Command) == 0 {
		return fmt.Errorf("kubelet: no Command to run it with")
	}
	s, err := Server(o)
	if err != nil {
		return err
	}
	if !cgroupsV2() {
		o.Log.Warn().Msg("this host runs cgroup v1, which Kubernetes deprecated in 1.35; the kubelet is started with failCgroupV1=false")
	}
	if err := waitPortFree(ctx, s.Address, s.Port, portWait); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return err
	}
	file := OptionsFile(o.Dir)
	if err := WriteOptions(file, o); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	childproc.Supervise(ctx, childproc.Options{Name: "kubelet", Argv: append(slices.Clip(o.Command), file), Log: o.Log})
	return nil
}

// waitPortFree waits up to d for the kubelet's port to be free.
func waitPortFree(ctx context.Context, address string, port int32, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := portFree(address, port)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// warnLines logs each line written to it as a warning: the flags'
// notices ("Flag --port has been deprecated, ..."), which the kubelet
// prints as text.
type warnLines struct{ log zerolog.Logger }

func (w warnLines) Write(p []byte) (int, error) {
	for _, l := range strings.Split(string(p), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			w.log.Warn().Msg(l)
		}
	}
	return len(p), nil
}

// RunInProcess runs the kubelet in this process until ctx is done. The
// kubelet is not built to stop inside a process that goes on: it returns
// when ctx ends, but some of its goroutines live until the process exits.
// Nor is it built to share its process: it ends it (os.Exit) on some
// failures, which docs/architecture.md lists. This is for the child
// process Run starts. The kubelet's --feature-gates become this process's.
// The commonest failure, a port another program holds, RunInProcess
// refuses before it starts.
func RunInProcess(ctx context.Context, o Options) error {
	s, err := server(o, warnLines{o.Log})
	if err != nil {
		return err
	}
	if err := portFree(s.Address, s.Port); err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(s.FeatureGates); err != nil {
		return fmt.Errorf("kubelet feature gates: %w", err)
	}
	// The kubelet creates the cgroups below its root, never the root.
	if s.CgroupsPerQOS && s.CgroupDriver == "cgroupfs" {
		if err := ensureCgroupRoot(s.CgroupRoot); err != nil {
			return err
		}
	}
	s.MaxOpenFiles = openFilesLimit(s.MaxOpenFiles, o.Log)
	// cAdvisor finds containerd's containers, and so the pod and container
	// labels of /metrics/cadvisor's series, through a Go flag of its own
	// whose default is upstream's /run/containerd/containerd.sock: this
	// node's containerd is elsewhere.
	if sock, ok := strings.CutPrefix(s.ContainerRuntimeEndpoint, "unix://"); ok {
		if f := flag.Lookup("containerd"); f != nil {
			if err := f.Value.Set(sock); err != nil {
				return fmt.Errorf("cAdvisor's containerd endpoint: %w", err)
			}
		}
	}
	deps, err := app.UnsecuredDependencies(ctx, s, utilfeature.DefaultFeatureGate)
	if err != nil {
		return fmt.Errorf("kubelet dependencies: %w", err)
	}
	return app.Run(ctx, s, deps, utilfeature.DefaultFeatureGate)
}

// openFilesLimit is the open-files limit the kubelet sets for itself
// (its maxOpenFiles, 1,000,000 by default): want, or this process's hard
// limit where the process may not raise it that far (a container without
// CAP_SYS_RESOURCE), which the kubelet can then set without failing.
func openFilesLimit(want int64, log zerolog.Logger) int64 {
	var lim unix.Rlimit
	if want <= 0 || unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil || lim.Max >= uint64(want) {
		return want
	}
	raised := unix.Rlimit{Cur: lim.Cur, Max: uint64(want)}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err == nil {
		return want
	}
	log.Info().Int64("maxOpenFiles", want).Uint64("limit", lim.Max).
		Msg("the kubelet's open-files limit is this process's hard limit: it may not raise it to maxOpenFiles here")
	return int64(lim.Max)
}
