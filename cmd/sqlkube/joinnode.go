package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pubkeypin"

	"github.com/sqlkube/sqlkube/controlplane"
	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/kubelet"
)

// joinFlags configure `sqlkube node` without --fake: a real node that
// joins a cluster.
type joinFlags struct {
	localNodeFlags
	server     string
	token      string
	caCertHash []string
	dataDir    string
}

// runJoinedNode runs a node for this host in a cluster it joins: with a
// bootstrap token, it finds the cluster CA as kubeadm's discovery does
// (kube-public/cluster-info, signed with the token and pinned by
// --ca-cert-hash), and the kubelet gets its client certificate through a
// CSR (TLS bootstrap) and its serving certificate through another
// (kubelet-serving, approved for nodes the cluster knows); with
// --kubeconfig, it uses that credential.
func runJoinedNode(ctx context.Context, f joinFlags, kubeconfigPath string, extraKubeletArgs []string, log zerolog.Logger) error {
	if err := f.checkRegistryConfigDir(); err != nil {
		return err
	}
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return err
	}
	nodeDir := nodeDirOf(dataDir)
	if err := os.MkdirAll(nodeDir, 0o700); err != nil {
		return err
	}
	name, ip, err := f.identity()
	if err != nil {
		return err
	}
	o := kubelet.Options{
		Dir: nodeDir, NodeName: name, NodeIP: ip.String(), ServerTLSBootstrap: true,
		ClientCAFile: filepath.Join(nodeDir, "ca.crt"),
		ClusterDNS:   f.clusterDNS, ClusterDomain: f.clusterDomain,
		ExtraArgs: append(extraKubeletArgs, f.kubeletArgs...),
	}
	var caPEM []byte
	server := f.server
	switch {
	case kubeconfigPath != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
		if err != nil {
			return fmt.Errorf("--kubeconfig: %w", err)
		}
		if caPEM = cfg.CAData; len(caPEM) == 0 && cfg.CAFile != "" {
			if caPEM, err = os.ReadFile(cfg.CAFile); err != nil {
				return err
			}
		}
		o.Kubeconfig, server = kubeconfigPath, cfg.Host
	case f.server != "" && f.token != "":
		if caPEM, err = discoverCluster(ctx, f.server, f.token, f.caCertHash, log); err != nil {
			return err
		}
		o.BootstrapKubeconfig = filepath.Join(nodeDir, "bootstrap.kubeconfig")
		o.Kubeconfig = filepath.Join(nodeDir, "kubelet.kubeconfig")
		if err := writeBootstrapKubeconfig(o.BootstrapKubeconfig, f.server, caPEM, f.token); err != nil {
			return err
		}
	default:
		return errors.New("give --server and --token (a bootstrap token, with --ca-cert-hash), or --kubeconfig, or --fake")
	}
	if len(caPEM) == 0 {
		return errors.New("no cluster CA: the kubeconfig names none")
	}
	// The kubelet trusts the cluster CA's client certificates (the API
	// server's) and, as the server's own node, the client CA's (the
	// admin's), which cluster-info publishes.
	trusted := caPEM
	if clientCA, err := fetchClientCA(ctx, server, caPEM); err != nil {
		log.Warn().Err(err).Msg("the kubelet trusts only the cluster CA's client certificates, not the admin's (read its endpoints through nodes/proxy)")
	} else {
		trusted = pemBundle(caPEM, clientCA)
	}
	if err := os.WriteFile(o.ClientCAFile, trusted, 0o644); err != nil {
		return err
	}
	var rt containerd.Runtime
	if f.runtimeEndpoint == "" {
		if rt, err = containerd.Missing(runtimeDirs()...); err != nil {
			return err
		}
	}
	if err := f.checkKubeProxy(name, ip.String(), o.Kubeconfig); err != nil {
		return err
	}
	endpoint, stopRuntime, err := startRuntime(ctx, f.localNodeFlags, rt, dataDir, log)
	if err != nil {
		return err
	}
	if endpoint == "" {
		return errors.New("this host cannot run containers (see above)")
	}
	defer stopRuntime()
	o.RuntimeEndpoint = endpoint
	o.Command, o.Log = kubeletCommand(log), log
	waitNetwork := startNodeNetwork(ctx, f.localNodeFlags, nodeNetwork{dir: nodeDir, name: name, ip: ip.String(), kubeconfig: o.Kubeconfig}, log)
	defer waitNetwork()
	log.Info().Str("node", name).Str("ip", ip.String()).Msg("starting the kubelet")
	return kubelet.Run(ctx, o)
}

// discoverCluster reads kube-public/cluster-info from server without
// trusting it yet, checks that the bootstrap token signed it (so the
// server knows the token) and that its CA matches one of caHashes
// (sha256:HEX of the public key, as kubeadm prints it), and returns the CA.
func discoverCluster(ctx context.Context, server, token string, caHashes []string, log zerolog.Logger) ([]byte, error) {
	if !bootstraputil.IsValidBootstrapToken(token) {
		return nil, fmt.Errorf("--token: not a bootstrap token (ID.SECRET, [a-z0-9]{6}.[a-z0-9]{16})")
	}
	id, secret, _ := strings.Cut(token, ".")
	pins := pubkeypin.NewSet()
	if err := pins.Allow(caHashes...); err != nil {
		return nil, fmt.Errorf("--ca-cert-hash: %w", err)
	}
	if pins.Empty() {
		return nil, errors.New("give --ca-cert-hash sha256:... (`sqlkube token create --print-join-command` prints it): without it a man in the middle could pose as the cluster")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// Not trusted yet: the token's signature and the pinned CA decide.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	url := strings.TrimSuffix(server, "/") + "/api/v1/namespaces/kube-public/configmaps/" + bootstrapapi.ConfigMapClusterInfo
	var kubeconfig string
	var lastErr error
	// The signer adds the token's signature shortly after the token is made.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			lastErr = err
			return false, nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("GET %s: %s", url, resp.Status)
			return false, nil
		}
		var cm corev1.ConfigMap
		if err := json.NewDecoder(resp.Body).Decode(&cm); err != nil {
			lastErr = err
			return false, nil
		}
		sig, ok := cm.Data[bootstrapapi.JWSSignatureKeyPrefix+id]
		if !ok {
			lastErr = fmt.Errorf("cluster-info is not signed for token %s yet", id)
			return false, nil
		}
		kubeconfig = cm.Data[bootstrapapi.KubeConfigKey]
		if !jws.DetachedTokenIsValid(sig, kubeconfig, id, secret) {
			return false, fmt.Errorf("cluster-info's signature does not match token %s: not this cluster, or a wrong token", id)
		}
		return true, nil
	})
	if err != nil {
		if lastErr != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("discovery: %w", lastErr)
		}
		return nil, fmt.Errorf("discovery: %w", err)
	}
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		certs, err := certutil.ParseCertsPEM(c.CertificateAuthorityData)
		if err != nil {
			return nil, fmt.Errorf("cluster-info CA: %w", err)
		}
		if err := pins.CheckAny(certs); err != nil {
			return nil, fmt.Errorf("the cluster's CA does not match --ca-cert-hash: %w", err)
		}
		log.Info().Str("server", server).Msg("found the cluster: its CA matches --ca-cert-hash and the token signed it")
		return c.CertificateAuthorityData, nil
	}
	return nil, errors.New("cluster-info holds no cluster")
}

// fetchClientCA reads the client CA from kube-public/cluster-info
// (controlplane.ClusterInfoClientCAKey) without credentials, over a
// connection verified with the cluster CA ca.
func fetchClientCA(ctx context.Context, server string, ca []byte) ([]byte, error) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the client CA: %w", err)
	}
	pem := []byte(cm.Data[controlplane.ClusterInfoClientCAKey])
	if len(pem) == 0 {
		return nil, fmt.Errorf("the client CA: cluster-info has no %s", controlplane.ClusterInfoClientCAKey)
	}
	if _, err := certutil.ParseCertsPEM(pem); err != nil {
		return nil, fmt.Errorf("the client CA in cluster-info: %w", err)
	}
	return pem, nil
}

func writeBootstrapKubeconfig(path, server string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sqlkube"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "sqlkube", AuthInfo: "bootstrap"}
	cfg.CurrentContext = "bootstrap"
	return clientcmd.WriteToFile(*cfg, path)
}
