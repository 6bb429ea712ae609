package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"path/filepath"
)

// KubeletClientCert and KubeletClientKey are the API server's client
// certificate towards kubelets (logs, exec, port-forward, proxy): CN
// kube-apiserver-kubelet-client in system:masters, from the cluster CA,
// which kubelets trust for clients (every node learns the cluster CA when
// it joins; the client CA stays the API server's own).
func (f Files) KubeletClientCert() string {
	return filepath.Join(f.Dir, "apiserver-kubelet-client.crt")
}
func (f Files) KubeletClientKey() string { return filepath.Join(f.Dir, "apiserver-kubelet-client.key") }

// NodeFiles are a node's credentials made by the cluster's own CAs (the
// server's own node; joining nodes bootstrap theirs through CSRs).
type NodeFiles struct {
	// ClientCert/Key: system:node:NAME in system:nodes, from the client CA.
	ClientCert, ClientKey string
	// ServingCert/Key: the kubelet's port, from the cluster CA, which the
	// API server verifies kubelets with.
	ServingCert, ServingKey string
}

// EnsureKubeletClient creates, when missing or due, the API server's
// client certificate towards kubelets.
func EnsureKubeletClient(dir string) (Files, error) {
	f := FilesIn(dir)
	ca, caKey, err := ensureCA(f.CACert, f.CAKey, "sqlkube-ca")
	if err != nil {
		return f, err
	}
	subject := pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}
	return f, ensureLeaf(f.KubeletClientCert(), f.KubeletClientKey(), ca, caKey, subject, nil, x509.ExtKeyUsageClientAuth)
}

// EnsureNode creates, when missing or due, node name's client and serving
// certificates under dir (the cluster's PKI directory), the serving one
// for hosts (its addresses and names) besides name itself.
func EnsureNode(dir, name string, hosts []string) (NodeFiles, error) {
	f := FilesIn(dir)
	p := func(s string) string { return filepath.Join(dir, "node-"+name+s) }
	nf := NodeFiles{
		ClientCert: p("-client.crt"), ClientKey: p("-client.key"),
		ServingCert: p("-serving.crt"), ServingKey: p("-serving.key"),
	}
	clientCA, clientCAKey, err := ensureCA(f.ClientCACert, f.ClientCAKey, "sqlkube-client-ca")
	if err != nil {
		return nf, err
	}
	client := pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}
	if err := ensureLeaf(nf.ClientCert, nf.ClientKey, clientCA, clientCAKey, client, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nf, err
	}
	ca, caKey, err := ensureCA(f.CACert, f.CAKey, "sqlkube-ca")
	if err != nil {
		return nf, err
	}
	serving := pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}
	hosts = append([]string{name, "localhost", "127.0.0.1"}, hosts...)
	return nf, ensureLeaf(nf.ServingCert, nf.ServingKey, ca, caKey, serving, hosts, x509.ExtKeyUsageServerAuth)
}

// EnsureComponentServing creates, when missing or due, the serving
// certificate of an in-process component's endpoint (name:
// kube-controller-manager, kube-scheduler) from the cluster CA, for name,
// localhost, 127.0.0.1 and hosts, and returns its files.
func EnsureComponentServing(dir, name string, hosts []string) (certFile, keyFile string, err error) {
	f := FilesIn(dir)
	certFile, keyFile = filepath.Join(dir, name+"-serving.crt"), filepath.Join(dir, name+"-serving.key")
	ca, caKey, err := ensureCA(f.CACert, f.CAKey, "sqlkube-ca")
	if err != nil {
		return "", "", err
	}
	hosts = append([]string{name, "localhost", "127.0.0.1"}, hosts...)
	return certFile, keyFile, ensureLeaf(certFile, keyFile, ca, caKey, pkix.Name{CommonName: name}, hosts, x509.ExtKeyUsageServerAuth)
}
