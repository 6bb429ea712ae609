package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sqlkube/sqlkube/internal/testcert"
)

// TestKubeProxyCommand: the command line the node agent starts kube-proxy
// with reaches kube-proxy's own flags (here one it refuses) through the
// hidden `sqlkube kube-proxy`, after the log flags.
func TestKubeProxyCommand(t *testing.T) {
	argv := kubeProxyCommand(zerolog.Nop().Level(zerolog.WarnLevel))
	if argv[0] != "/proc/self/exe" || !strings.Contains(strings.Join(argv, " "), "--log-format=json --log-level=warn kube-proxy --") {
		t.Fatalf("kube-proxy runs as %q", argv)
	}
	root := newRootCommand()
	root.SetArgs(append(argv[1:], "--no-such-flag"))
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --no-such-flag") {
		t.Errorf("sqlkube kube-proxy -- --no-such-flag: %v, want kube-proxy's unknown flag", err)
	}
}

// TestNodeClient_WaitsForTheCertificate: a joining kubelet writes its
// kubeconfig before the client certificate it names exists; the node's
// agents wait for both.
func TestNodeClient_WaitsForTheCertificate(t *testing.T) {
	dir := t.TempDir()
	kubeconfig, certFile := filepath.Join(dir, "kubelet.kubeconfig"), filepath.Join(dir, "pki", "kubelet-client-current.pem")
	caPEM, cert := testcert.Serving(t, "127.0.0.1")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: caPEM}
	cfg.AuthInfos["n"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: certFile}
	cfg.Contexts["n"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "n"}
	cfg.CurrentContext = "n"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, _, err := nodeClient(ctx, kubeconfig); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "kubelet-client-current.pem") {
		t.Fatalf("without its certificate: %v, want to wait for it until the context ends", err)
	}

	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	both := append(encodePEM("CERTIFICATE", cert.Certificate[0]), encodePEM("PRIVATE KEY", key)...)
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, both, 0o600); err != nil {
		t.Fatal(err)
	}
	client, closeClient, err := nodeClient(context.Background(), kubeconfig)
	if err != nil || client == nil {
		t.Fatalf("with its certificate: %v", err)
	}
	closeClient()
}

func encodePEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
