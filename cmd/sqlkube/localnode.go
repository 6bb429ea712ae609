package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/clusterdns"
	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/images"
	"github.com/sqlkube/sqlkube/node/kubelet"
)

// localNodeFlags configure the node `sqlkube server` runs for its own host:
// Kubernetes' kubelet over containerd.
type localNodeFlags struct {
	disable         bool
	name            string
	ip              string
	runtimeEndpoint string
	sandboxImage    string
	// registryConfigDir is the containerd's registry hosts directory
	// (absolute once checkRegistryConfigDir has run).
	registryConfigDir string
	kubeletArgs       []string
	// Services: kube-proxy in the node agent.
	disableKubeProxy bool
	kubeProxyArgs    []string
	// clusterDNS and clusterDomain go into pods' resolv.conf (flags of
	// `sqlkube node`; `sqlkube server` sets them from its DNS flags).
	clusterDNS    []string
	clusterDomain string
}

func addLocalNodeFlags(fl *pflag.FlagSet, f *localNodeFlags, server bool) {
	if server {
		fl.BoolVar(&f.disable, "disable-node", false, "run no node (kubelet) for this host: the control plane only")
	}
	fl.StringVar(&f.name, "node-name", "", "this host's node name (default: the host name)")
	fl.StringVar(&f.ip, "node-ip", "", "this host's node address (default: the address of the default route's interface)")
	fl.StringVar(&f.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint of an existing runtime (containerd 2, CRI-O), unix://PATH (default: start sqlkube's own containerd, configured under DATA_DIR/containerd)")
	fl.StringVar(&f.sandboxImage, "pod-infra-container-image", images.PauseImageName, "sandbox (pause) image of the containerd sqlkube starts; the default is made by sqlkube and needs no registry")
	fl.StringVar(&f.registryConfigDir, "registry-config-dir", "", "registry hosts directory of the containerd sqlkube starts: DIR/HOST/hosts.toml, in containerd's format, says how to pull from registry HOST (mirrors, plain HTTP, CAs) and is read at every pull (default: containerd's, /etc/containerd/certs.d and /etc/docker/certs.d)")
	fl.StringArrayVar(&f.kubeletArgs, "kubelet-arg", nil, "extra kubelet flag, e.g. --kubelet-arg=--max-pods=50 (repeatable)")
	fl.BoolVar(&f.disableKubeProxy, "disable-kube-proxy", false, "run no kube-proxy on this node (Services' cluster IPs and node ports): for clusters that bring their own service proxy")
	fl.StringArrayVar(&f.kubeProxyArgs, "kube-proxy-arg", nil, "extra kube-proxy flag, e.g. --kube-proxy-arg=--proxy-mode=iptables (default: nftables where the kernel and nft allow it, iptables otherwise) (repeatable)")
	if !server {
		fl.StringSliceVar(&f.clusterDNS, "cluster-dns", []string{defaultClusterDNS}, "the cluster DNS (the kube-dns Service's IP) pods' resolv.conf names (empty: pods get the host's resolvers)")
		fl.StringVar(&f.clusterDomain, "cluster-domain", clusterdns.DefaultDomain, "the cluster's DNS domain")
	}
}

// defaultClusterDNS is the kube-dns Service's IP with the default service
// range (the tenth address of 10.96.0.0/12).
const defaultClusterDNS = "10.96.0.10"

// cniBinDirs are where Debian (/usr/lib/cni) and upstream (/opt/cni/bin)
// install the CNI plugins.
var cniBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// errNoCNI says what a node without the CNI plugins needs.
var errNoCNI = errors.New("the CNI plugins are missing (Debian: apt-get install containernetworking-plugins)")

// cniBinDir is the first of cniBinDirs that holds the CNI plugins ("" if
// none does).
func cniBinDir() string {
	for _, d := range cniBinDirs {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			return d
		}
	}
	return ""
}

// runLocalNode starts containerd (unless an endpoint is given) and the
// kubelet for this host (in a child process, kubelet.Run), registered as
// system:node:NAME with a certificate from the cluster's client CA,
// against the API at apiURL.
// It returns when ctx ends; a host that cannot run containers gets one
// line saying why, and the control plane goes on without a node.
func runLocalNode(ctx context.Context, f localNodeFlags, dataDir, apiURL string, files pki.Files, log zerolog.Logger) error {
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	var rt containerd.Runtime
	if f.runtimeEndpoint == "" {
		// Everything the node lacks, in one line: a machine without it
		// (no root, runc not built) is a normal place to run the
		// control plane, so this is no warning.
		var why []string
		if rt, err = containerd.Missing(runtimeDirs()...); err != nil {
			why = append(why, err.Error())
		}
		if cniBinDir() == "" {
			why = append(why, errNoCNI.Error())
		}
		if len(why) > 0 {
			log.Info().Msgf("no node for this host, the control plane runs without one: %s (as root, make run installs and builds what it needs; --disable-node silences this)", strings.Join(why, "; "))
			return nil
		}
	}
	name, ip, err := f.identity()
	if err != nil {
		return err
	}
	nodeFiles, err := pki.EnsureNode(files.Dir, name, []string{ip.String()})
	if err != nil {
		return fmt.Errorf("node certificates: %w", err)
	}
	nodeDir := nodeDirOf(dataDir)
	kubeconfig := filepath.Join(nodeDir, "kubelet.kubeconfig")
	if err := writeNodeKubeconfig(kubeconfig, apiURL, files.CACert, nodeFiles); err != nil {
		return err
	}

	if err := f.checkKubeProxy(name, ip.String(), kubeconfig); err != nil {
		return err
	}
	endpoint, stopRuntime, err := startRuntime(ctx, f, rt, dataDir, log)
	if err != nil || endpoint == "" {
		return err
	}
	defer stopRuntime()
	waitNetwork := startNodeNetwork(ctx, f, nodeNetwork{dir: nodeDir, name: name, ip: ip.String(), kubeconfig: kubeconfig}, log)
	defer waitNetwork()
	clientCA, err := writeKubeletClientCA(nodeDir, files.CACert, files.ClientCACert)
	if err != nil {
		return err
	}
	log.Info().Str("node", name).Str("ip", ip.String()).Msg("starting the kubelet")
	return kubelet.Run(ctx, kubelet.Options{
		Dir: nodeDir, NodeName: name, NodeIP: ip.String(), Kubeconfig: kubeconfig,
		ClientCAFile: clientCA, TLSCertFile: nodeFiles.ServingCert, TLSKeyFile: nodeFiles.ServingKey,
		RuntimeEndpoint: endpoint, ExtraArgs: f.kubeletArgs,
		ClusterDNS: f.clusterDNS, ClusterDomain: f.clusterDomain,
		Command: kubeletCommand(log), Log: log,
	})
}

// checkRegistryConfigDir refuses a --registry-config-dir that is not a
// directory, or that would configure nothing (the runtime is not
// sqlkube's), and makes it absolute: containerd runs in sqlkube's working
// directory, but a relative path there is easy to misread.
func (f *localNodeFlags) checkRegistryConfigDir() error {
	if f.registryConfigDir == "" {
		return nil
	}
	if f.runtimeEndpoint != "" {
		return errors.New("--registry-config-dir configures the containerd sqlkube starts; with --container-runtime-endpoint, set that runtime's own (containerd: config_path)")
	}
	dir, err := filepath.Abs(f.registryConfigDir)
	if err != nil {
		return fmt.Errorf("--registry-config-dir: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--registry-config-dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--registry-config-dir %s: not a directory", dir)
	}
	f.registryConfigDir = dir
	return nil
}

// identity is the node's name (default: the host name) and address
// (default: the default route's interface).
func (f localNodeFlags) identity() (string, net.IP, error) {
	name := f.name
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", nil, fmt.Errorf("--node-name: %w", err)
		}
		name = strings.ToLower(h)
	}
	ip := net.ParseIP(f.ip)
	if f.ip != "" && ip == nil {
		return "", nil, fmt.Errorf("--node-ip %q is not an IP", f.ip)
	}
	if ip == nil {
		var err error
		if ip, err = utilnet.ChooseHostInterface(); err != nil {
			ip = net.ParseIP("127.0.0.1")
		}
	}
	return name, ip, nil
}

// startRuntime starts containerd (sqlkube's own, `sqlkube containerd`,
// with rt's shim and runc) for a node under dataDir, unless
// --container-runtime-endpoint names one: its CNI configuration and the
// sandbox image too. An empty endpoint and no error: this host cannot run
// containers (logged).
func startRuntime(ctx context.Context, f localNodeFlags, rt containerd.Runtime, dataDir string, log zerolog.Logger) (string, func(), error) {
	nodeDir := nodeDirOf(dataDir)
	endpoint := f.runtimeEndpoint
	if endpoint == "" {
		cniBin := cniBinDir()
		if cniBin == "" {
			log.Warn().Msgf("no node for this host: %v", errNoCNI)
			return "", func() {}, nil
		}
		// The configuration is written once the node has its pod CIDR
		// (startNodeNetwork); the runtime watches the directory.
		cniConf := cniConfDir(nodeDir)
		if err := os.MkdirAll(cniConf, 0o700); err != nil {
			return "", nil, err
		}
		ctrDir := containerdDirOf(dataDir)
		proc, err := containerd.Start(ctx, containerd.Options{
			Dir: ctrDir, SandboxImage: f.sandboxImage, CNIBinDir: cniBin, CNIConfDir: cniConf,
			Command: selfCommand("containerd"), Runtime: rt, RegistryConfigDir: f.registryConfigDir,
		})
		if err != nil {
			return "", nil, err
		}
		if f.sandboxImage == images.PauseImageName {
			archive := filepath.Join(ctrDir, "pause.tar")
			if err := writeImageArchive(archive, images.PauseImage(f.sandboxImage)); err != nil {
				proc.Stop()
				return "", nil, err
			}
			if _, err := containerd.Import(ctx, selfCommand("ctr"), proc.Endpoint, archive); err != nil {
				proc.Stop()
				return "", nil, fmt.Errorf("sandbox image: %w", err)
			}
		}
		ev := log.Info().Str("endpoint", proc.Endpoint).Str("shim", rt.Shim).Str("runc", rt.Runc)
		if f.registryConfigDir != "" {
			ev = ev.Str("registry-config-dir", f.registryConfigDir)
		}
		ev.Msg("containerd started")
		return proc.Endpoint, proc.Stop, nil
	}
	return endpoint, func() {}, nil
}

func writeImageArchive(path string, img images.Image) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := images.WriteArchive(file, img); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// writeNodeKubeconfig writes the kubelet's credential: the cluster CA and
// the node's client certificate, by path (they are renewed in place).
func writeNodeKubeconfig(path, url, caFile string, nf pki.NodeFiles) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sqlkube"] = &clientcmdapi.Cluster{Server: url, CertificateAuthority: caFile}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: nf.ClientCert, ClientKey: nf.ClientKey}
	cfg.Contexts["node"] = &clientcmdapi.Context{Cluster: "sqlkube", AuthInfo: "node"}
	cfg.CurrentContext = "node"
	return clientcmd.WriteToFile(*cfg, path)
}

// nodeDirOf and containerdDirOf are a node's directories under its data
// directory: the kubelet's and the pod network's, and containerd's.
func nodeDirOf(dataDir string) string       { return filepath.Join(dataDir, "node") }
func containerdDirOf(dataDir string) string { return filepath.Join(dataDir, "containerd") }

// cniConfDir and cniIPAMDir are under a node's directory.
func cniConfDir(nodeDir string) string { return filepath.Join(nodeDir, "cni", "net.d") }
func cniIPAMDir(nodeDir string) string { return filepath.Join(nodeDir, "cni", "ipam") }

// pemBundle is the PEM documents one after another, each ending in a
// newline.
func pemBundle(pems ...[]byte) []byte {
	var bundle []byte
	for _, pem := range pems {
		bundle = append(bundle, pem...)
		if len(pem) > 0 && pem[len(pem)-1] != '\n' {
			bundle = append(bundle, '\n')
		}
	}
	return bundle
}

// writeKubeletClientCA writes the CAs whose client certificates the
// server's own node's kubelet accepts into nodeDir: the cluster CA, which
// signs the API server's kubelet client certificate, and the client CA,
// which signs the admin kubeconfig's and the other users', so that the
// admin reads the kubelet's endpoints directly as on a kubeadm cluster
// (where one CA signs both). Written at every start, as the CAs may have
// been rotated.
func writeKubeletClientCA(nodeDir string, cas ...string) (string, error) {
	var pems [][]byte
	for _, ca := range cas {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return "", fmt.Errorf("the kubelet's client CAs: %w", err)
		}
		pems = append(pems, pem)
	}
	path := filepath.Join(nodeDir, "kubelet-client-ca.crt")
	if err := os.WriteFile(path, pemBundle(pems...), 0o644); err != nil {
		return "", fmt.Errorf("the kubelet's client CAs: %w", err)
	}
	return path, nil
}
