// Package kubelet runs Kubernetes' own kubelet (k8s.io/kubernetes/cmd/kubelet/app)
// inside sqlkube, over a CRI runtime (the containerd of package
// node/containerd, or one the user names), configured as a node on this
// host needs it: cgroupfs without per-QoS cgroups, x509 client
// certificates and webhook authorization towards the API server, and
// every directory it owns under the node's data directory where the
// kubelet lets us choose.
package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
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
}

// portFree reports an error when the kubelet could not listen on
// address:port: it would find out after it started, in a goroutine, and
// end the process.
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
// kubelet command line would, and validates them.
func Server(o Options) (*options.KubeletServer, error) {
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
	// What a host without systemd and with a shared cgroup tree allows:
	// the cgroupfs driver, no per-QoS hierarchy, no node-allocatable
	// enforcement, and swap tolerated.
	kc.CgroupDriver = "cgroupfs"
	kc.CgroupsPerQOS = false
	kc.EnforceNodeAllocatable = []string{}
	kc.FailSwapOn = false
	kc.ResolverConfig = "/etc/resolv.conf"
	kc.SerializeImagePulls = false
	// Node status as kubelets report it now: the Lease every 10 s, the
	// status on change or every 5 minutes.
	kc.NodeStatusReportFrequency = metav1.Duration{Duration: 5 * time.Minute}

	if len(o.ExtraArgs) > 0 {
		fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
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
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(kc.FeatureGates); err != nil {
		return nil, fmt.Errorf("kubelet feature gates: %w", err)
	}
	if err := options.ValidateKubeletFlags(kf); err != nil {
		return nil, fmt.Errorf("kubelet flags: %w", err)
	}
	if err := validation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate); err != nil {
		return nil, fmt.Errorf("kubelet configuration: %w", err)
	}
	return &options.KubeletServer{KubeletFlags: *kf, KubeletConfiguration: *kc}, nil
}

// Run runs the kubelet until ctx is done. The kubelet is not built to
// stop inside a process that goes on: Run returns when ctx ends, but some
// of its goroutines live until the process exits, as in k3s. Nor is it
// built to share its process: it ends it (os.Exit) on some failures,
// which docs/architecture.md lists. The commonest, a port another
// program holds, Run refuses before it starts.
func Run(ctx context.Context, o Options) error {
	s, err := Server(o)
	if err != nil {
		return err
	}
	if err := portFree(s.Address, s.Port); err != nil {
		return err
	}
	deps, err := app.UnsecuredDependencies(ctx, s, utilfeature.DefaultFeatureGate)
	if err != nil {
		return fmt.Errorf("kubelet dependencies: %w", err)
	}
	return app.Run(ctx, s, deps, utilfeature.DefaultFeatureGate)
}
