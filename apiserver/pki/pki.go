package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// leafValidity is how long issued certificates last (the CAs made by
// client-go's NewSelfSignedCACert last ten years).
const leafValidity = 365 * 24 * time.Hour

// DefaultClusterDomain is the cluster's DNS domain when Options give none.
const DefaultClusterDomain = "cluster.local"

// Options shape the serving certificate.
type Options struct {
	// Hosts are extra names and IPs of the serving certificate: the
	// advertised address, the kubernetes Service's IP, --tls-san... (see
	// APIServerNames for the ones it always carries).
	Hosts []string
	// ClusterDomain completes the kubernetes Service's full name,
	// kubernetes.default.svc.DOMAIN (default DefaultClusterDomain).
	ClusterDomain string
}

// APIServerNames are the names and IPs every serving certificate of the
// API carries besides Options.Hosts: the loopback addresses and
// localhost, the names of the kubernetes Service in namespace default as
// kube-apiserver's certificate has them (kubernetes, kubernetes.default,
// kubernetes.default.svc, kubernetes.default.svc.DOMAIN), and the host
// name.
func APIServerNames(clusterDomain string) []string {
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	return withHostname([]string{"127.0.0.1", "::1", "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain})
}

// Files are the paths of a cluster's PKI under DIR/tls.
type Files struct {
	Dir                       string
	CACert, CAKey             string
	ServingCert, ServingKey   string
	ClientCACert, ClientCAKey string
	AdminCert, AdminKey       string
	// FrontProxyCACert/Key sign FrontProxyClientCert/Key, which the
	// aggregation proxy presents to aggregated API servers; they trust
	// it through the requestheader CA the API server publishes.
	FrontProxyCACert, FrontProxyCAKey         string
	FrontProxyClientCert, FrontProxyClientKey string
	ServiceAccountKey, ServiceAccount         string
	// EtcdServerCert/Key serve the etcd API; EtcdClientCert/Key are for
	// tools that call it (both from the cluster CA, which verifies clients
	// of the etcd API). They exist once EnsureEtcd made them.
	EtcdServerCert, EtcdServerKey string
	EtcdClientCert, EtcdClientKey string
}

// FilesIn names the files under dir, by absolute path.
func FilesIn(dir string) Files {
	// Absolute, so that a kubeconfig or a config file that names these
	// files by path means the same wherever it is read from (clientcmd
	// reads a relative path relative to the kubeconfig's own directory).
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	return Files{
		Dir:    dir,
		CACert: p("ca.crt"), CAKey: p("ca.key"),
		ServingCert: p("apiserver.crt"), ServingKey: p("apiserver.key"),
		ClientCACert: p("client-ca.crt"), ClientCAKey: p("client-ca.key"),
		AdminCert: p("admin.crt"), AdminKey: p("admin.key"),
		FrontProxyCACert: p("front-proxy-ca.crt"), FrontProxyCAKey: p("front-proxy-ca.key"),
		FrontProxyClientCert: p("front-proxy-client.crt"), FrontProxyClientKey: p("front-proxy-client.key"),
		ServiceAccountKey: p("sa.key"), ServiceAccount: p("sa.pub"),
		EtcdServerCert: p("etcd-server.crt"), EtcdServerKey: p("etcd-server.key"),
		EtcdClientCert: p("etcd-client.crt"), EtcdClientKey: p("etcd-client.key"),
	}
}

// Ensure creates whatever of the cluster's PKI is missing under dir and
// returns its files.
func Ensure(dir string, o Options) (Files, error) {
	f := FilesIn(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	ca, caKey, err := ensureCA(f.CACert, f.CAKey, "sqlkube-ca")
	if err != nil {
		return f, err
	}
	hosts := append(APIServerNames(o.ClusterDomain), o.Hosts...)
	if err := ensureLeaf(f.ServingCert, f.ServingKey, ca, caKey, pkix.Name{CommonName: "kube-apiserver"}, hosts, x509.ExtKeyUsageServerAuth); err != nil {
		return f, err
	}
	clientCA, clientCAKey, err := ensureCA(f.ClientCACert, f.ClientCAKey, "sqlkube-client-ca")
	if err != nil {
		return f, err
	}
	admin := pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}}
	if err := ensureLeaf(f.AdminCert, f.AdminKey, clientCA, clientCAKey, admin, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return f, err
	}
	frontProxyCA, frontProxyCAKey, err := ensureCA(f.FrontProxyCACert, f.FrontProxyCAKey, "sqlkube-front-proxy-ca")
	if err != nil {
		return f, err
	}
	if err := ensureLeaf(f.FrontProxyClientCert, f.FrontProxyClientKey, frontProxyCA, frontProxyCAKey, pkix.Name{CommonName: FrontProxyClientName}, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return f, err
	}
	if err := ensureServiceAccountKey(f.ServiceAccountKey, f.ServiceAccount); err != nil {
		return f, err
	}
	return f, nil
}

// FrontProxyClientName is the front-proxy client certificate's common
// name, the requestheader allowed name aggregated servers check.
const FrontProxyClientName = "front-proxy-client"

// EnsureEtcd creates (under dir, from the cluster CA, which it creates if
// missing) whatever is missing or due of the etcd API's serving
// certificate, for 127.0.0.1, localhost, the host name and hosts, and of a
// client certificate for tools (CN etcd-client).
func EnsureEtcd(dir string, hosts []string) (Files, error) {
	f := FilesIn(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	ca, caKey, err := ensureCA(f.CACert, f.CAKey, "sqlkube-ca")
	if err != nil {
		return f, err
	}
	hosts = withHostname(append([]string{"127.0.0.1", "localhost"}, hosts...))
	if err := ensureLeaf(f.EtcdServerCert, f.EtcdServerKey, ca, caKey, pkix.Name{CommonName: "etcd-server"}, hosts, x509.ExtKeyUsageServerAuth); err != nil {
		return f, err
	}
	if err := ensureLeaf(f.EtcdClientCert, f.EtcdClientKey, ca, caKey, pkix.Name{CommonName: "etcd-client"}, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return f, err
	}
	return f, nil
}

func withHostname(hosts []string) []string {
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return hosts
}

func exists(paths ...string) (bool, error) {
	n := 0
	for _, p := range paths {
		_, err := os.Stat(p)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, os.ErrNotExist):
			return false, err
		}
	}
	if n != 0 && n != len(paths) {
		return false, fmt.Errorf("pki: only some of %v exist; remove them or supply the rest", paths)
	}
	return n == len(paths), nil
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func ensureCA(certPath, keyPath, name string) (*x509.Certificate, crypto.Signer, error) {
	ok, err := exists(certPath, keyPath)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		return load(certPath, keyPath)
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: name}, key)
	if err != nil {
		return nil, nil, err
	}
	if err := write(certPath, keyPath, ca.Raw, key); err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

func load(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := cert.CertsFromFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.PrivateKeyFromFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s is not a signing key", keyPath)
	}
	return certs[0], signer, nil
}

// ensureLeaf creates a certificate signed by ca unless one exists that is
// still valid for a month and names exactly hosts: a host added or gone
// (a new --tls-san, another advertised address) issues a new one.
func ensureLeaf(certPath, keyPath string, ca *x509.Certificate, caKey crypto.Signer, subject pkix.Name, hosts []string, usage x509.ExtKeyUsage) error {
	ok, err := exists(certPath, keyPath)
	if err != nil {
		return err
	}
	if ok {
		c, _, err := load(certPath, keyPath)
		if err == nil && time.Until(c.NotAfter) > 30*24*time.Hour && namesExactly(c, hosts) && c.CheckSignatureFrom(ca) == nil {
			return nil
		}
	}
	return issueLeaf(certPath, keyPath, ca, caKey, subject, hosts, usage, time.Now())
}

// subjectAltNames splits hosts into DNS names and IPs, each once, in
// their first order ("" is none).
func subjectAltNames(hosts []string) (dns []string, ips []net.IP) {
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

// namesExactly reports whether c's DNS names and IPs are those of hosts,
// in any order.
func namesExactly(c *x509.Certificate, hosts []string) bool {
	dns, ips := subjectAltNames(hosts)
	have, haveIPs := subjectAltNames(append(slices.Clone(c.DNSNames), ipStrings(c.IPAddresses)...))
	if len(dns) != len(have) || len(ips) != len(haveIPs) {
		return false
	}
	for _, d := range dns {
		if !slices.Contains(have, d) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(haveIPs, ip.Equal) {
			return false
		}
	}
	return true
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

// issueLeaf writes a new key and a certificate for it valid from now for
// leafValidity.
func issueLeaf(certPath, keyPath string, ca *x509.Certificate, caKey crypto.Signer, subject pkix.Name, hosts []string, usage x509.ExtKeyUsage, now time.Time) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: subject,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(leafValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	tmpl.DNSNames, tmpl.IPAddresses = subjectAltNames(hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	return write(certPath, keyPath, der, key)
}

func write(certPath, keyPath string, der []byte, key crypto.Signer) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := keyutil.WriteKey(keyPath, keyPEM); err != nil { // 0600
		return err
	}
	certPEM, err := cert.EncodeCertificates(&x509.Certificate{Raw: der})
	if err != nil {
		return err
	}
	return cert.WriteCert(certPath, certPEM)
}

func ensureServiceAccountKey(keyPath, pubPath string) error {
	ok, err := exists(keyPath, pubPath)
	if err != nil || ok {
		return err
	}
	key, err := newKey()
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := keyutil.WriteKey(keyPath, keyPEM); err != nil {
		return err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
}
