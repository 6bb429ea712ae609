package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	certutil "k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/apiserver/pki"
)

// isLocalListen reports whether an etcd listen address is reachable only
// from this host: a unix:// socket, localhost or a loopback IP. An empty
// or unspecified host (":2379", "0.0.0.0:2379") and any other name are
// not local.
func isLocalListen(addr string) bool {
	if strings.HasPrefix(addr, "unix://") {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// requireClientCerts refuses to serve the etcd API (which has no
// authorization: any client may read every secret) on an address other
// hosts reach, unless TLS with verified client certificates is required;
// fix names the flags that fix it.
func requireClientCerts(addr string, cfg *tls.Config, fix string) error {
	if isLocalListen(addr) || (cfg != nil && cfg.ClientAuth == tls.RequireAndVerifyClientCert) {
		return nil
	}
	return fmt.Errorf("refusing to serve the etcd API on %s without TLS client-certificate authentication: give %s, or listen on a loopback address or a unix:// socket", addr, fix)
}

// etcdServerTLS is the TLS of `sqlkube server --etcd-listen-address`: none
// on a local address unless --etcd-client-cert-auth asks for it;
// otherwise a serving certificate and a client certificate for tools
// under DATA_DIR/tls from the cluster CA (pki.EnsureEtcd), and client
// certificates of that CA required.
func etcdServerTLS(f *serverFlags) (*tls.Config, *pki.Files, error) {
	if isLocalListen(f.etcdListenAddress) && !f.etcdClientCertAuth {
		return nil, nil, nil
	}
	hosts := append([]string{}, f.api.TLSSANs...)
	if host, _, err := net.SplitHostPort(f.etcdListenAddress); err == nil {
		ip := net.ParseIP(host)
		switch {
		case host == "" || (ip != nil && ip.IsUnspecified()):
			if ip, err := utilnet.ResolveBindAddress(net.IPv4zero); err == nil {
				hosts = append(hosts, ip.String()) // the host's address
			}
		default:
			hosts = append(hosts, host)
		}
	}
	files, err := pki.EnsureEtcd(filepath.Join(f.api.DataDir, "tls"), hosts)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd certificates: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(files.EtcdServerCert, files.EtcdServerKey)
	if err != nil {
		return nil, nil, err
	}
	pool, err := certutil.NewPool(files.CACert)
	if err != nil {
		return nil, nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
	}, &files, nil
}
