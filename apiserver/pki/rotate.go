package pki

import (
	"crypto/x509"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
)

// leaf is an issued certificate and the CA that signs it.
type leaf struct{ cert, key, caCert, caKey string }

// leaves are the PKI's issued certificates (some may not exist).
func (f Files) leaves() []leaf {
	return []leaf{
		{f.ServingCert, f.ServingKey, f.CACert, f.CAKey},
		{f.AdminCert, f.AdminKey, f.ClientCACert, f.ClientCAKey},
		{f.FrontProxyClientCert, f.FrontProxyClientKey, f.FrontProxyCACert, f.FrontProxyCAKey},
		{f.EtcdServerCert, f.EtcdServerKey, f.CACert, f.CAKey},
		{f.EtcdClientCert, f.EtcdClientKey, f.CACert, f.CAKey},
	}
}

// Rotate renews every leaf certificate under dir that exists (the API
// server's serving certificate, the admin's, the etcd ones): a new key and
// serial number, a full validity from now, the same subject, names and
// usage, signed by the same CA. The CAs and the service-account key are
// left byte for byte, so clients that trust the CAs keep working. Each
// file is replaced in place (key first); readers should reload a pair when
// its certificate file changes. It returns the renewed certificates'
// paths.
func Rotate(dir string) ([]string, error) { return rotate(dir, time.Now()) }

func rotate(dir string, now time.Time) ([]string, error) {
	f := FilesIn(dir)
	var renewed []string
	for _, l := range f.leaves() {
		ok, err := exists(l.cert, l.key)
		if err != nil {
			return renewed, err
		}
		if !ok {
			continue
		}
		old, err := cert.CertsFromFile(l.cert)
		if err != nil {
			return renewed, err
		}
		ca, caKey, err := load(l.caCert, l.caKey)
		if err != nil {
			return renewed, fmt.Errorf("pki: the CA of %s: %w", l.cert, err)
		}
		c := old[0]
		usage := x509.ExtKeyUsageServerAuth
		if len(c.ExtKeyUsage) > 0 {
			usage = c.ExtKeyUsage[0]
		}
		hosts := append([]string{}, c.DNSNames...)
		for _, ip := range c.IPAddresses {
			hosts = append(hosts, ip.String())
		}
		if err := issueLeaf(l.cert, l.key, ca, caKey, c.Subject, hosts, usage, now); err != nil {
			return renewed, err
		}
		renewed = append(renewed, l.cert)
	}
	if len(renewed) == 0 {
		return nil, fmt.Errorf("pki: no certificates under %s", dir)
	}
	return renewed, nil
}

// Certificate describes one certificate of the PKI.
type Certificate struct {
	Path      string
	Subject   string
	CA        bool
	Serial    *big.Int
	NotBefore time.Time
	NotAfter  time.Time
}

// Certificates lists the CAs and leaves under dir that exist, CAs first.
func Certificates(dir string) ([]Certificate, error) {
	f := FilesIn(dir)
	paths := []string{f.CACert, f.ClientCACert, f.FrontProxyCACert}
	for _, l := range f.leaves() {
		paths = append(paths, l.cert)
	}
	var out []Certificate
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		certs, err := cert.CertsFromFile(p)
		if err != nil {
			return nil, err
		}
		c := certs[0]
		out = append(out, Certificate{Path: filepath.Clean(p), Subject: c.Subject.String(), CA: c.IsCA,
			Serial: c.SerialNumber, NotBefore: c.NotBefore, NotAfter: c.NotAfter})
	}
	return out, nil
}
