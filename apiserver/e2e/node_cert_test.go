package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// TestKubectl_NodeCertificate: a node's client certificate (CN
// system:node:n1, O system:nodes, signed by the cluster's client CA, as a
// kubelet's) reads the pods bound to n1 and the secrets they use, and
// nothing of another node's.
func TestKubectl_NodeCertificate(t *testing.T) {
	kubectl := kubectls(t)["kubectl"]
	s := startServer(t, t.TempDir())
	for _, args := range [][]string{
		{"create", "secret", "generic", "s1", "--from-literal=k=one"},
		{"create", "secret", "generic", "s2", "--from-literal=k=two"},
		{"create", "-f", writePodOn(t, "p1", "n1", "s1")},
		{"create", "-f", writePodOn(t, "p2", "n2", "s2")},
	} {
		s.mustKubectl(t, kubectl, args...)
	}
	node := s.clientCertKubeconfig(t, "system:node:n1", "system:nodes")
	// The cluster CA every pod's service-account volume carries is
	// published in each namespace.
	if out := s.eventually(t, s.kubeconfig, kubectl, "kube-root-ca.crt", "get", "configmap", "kube-root-ca.crt", "-o", "jsonpath={.metadata.name}"); out != "kube-root-ca.crt" {
		t.Fatalf("kube-root-ca.crt in default: %q", out)
	}

	// The Node authorizer learns of pods through its informers: the first
	// read may race them.
	if out := s.eventually(t, node, kubectl, "p1", "get", "pod", "p1", "-o", "jsonpath={.metadata.name}"); out != "p1" {
		t.Fatalf("n1 reading its own pod p1: %q", out)
	}
	if out := s.eventually(t, node, kubectl, "s1", "get", "secret", "s1", "-o", "jsonpath={.metadata.name}"); out != "s1" {
		t.Fatalf("n1 reading s1, which its pod uses: %q", out)
	}
	for _, args := range [][]string{
		{"get", "pod", "p2"},
		{"get", "secret", "s2"},
		{"get", "secrets"},
		{"get", "pods", "-A"},
		// Nodes may read every Node (their pod-network agent routes to
		// the others' pod CIDRs), but not change another's.
		{"delete", "node", "n2"},
	} {
		out, err := s.kubectlWith(t, node, kubectl, args...)
		if err == nil || !strings.Contains(out+err.Error(), "Forbidden") {
			t.Errorf("n1: kubectl %s: %q %v, want Forbidden", strings.Join(args, " "), out, err)
		}
	}
}

// writePodOn writes a pod bound to node that mounts secret.
func writePodOn(t *testing.T, name, node, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	doc := `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
spec:
  nodeName: ` + node + `
  containers:
  - name: c
    image: busybox:1.36
    volumeMounts:
    - name: s
      mountPath: /s
  volumes:
  - name: s
    secret:
      secretName: ` + secret + `
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientCertKubeconfig writes a kubeconfig for the server whose user is a
// certificate for cn in group org, signed by the server's client CA.
func (s *server) clientCertKubeconfig(t *testing.T, cn, org string) string {
	t.Helper()
	tls := filepath.Join(s.dataDir, "tls")
	cas, err := certutil.CertsFromFile(filepath.Join(tls, "client-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := keyutil.PrivateKeyFromFile(filepath.Join(tls, "client-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{org}},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, cas[0], key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{
			ClientCertificateData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ClientKeyData: keyPEM,
		}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
