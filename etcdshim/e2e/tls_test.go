package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a throwaway certificate authority whose files live in a test's
// temporary directory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
	dir  string
}

func newTestKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return key
}

func newSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("serial number: %v", err)
	}
	return n
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// newTestCA creates a CA named name and writes its certificate to
// dir/name.pem.
func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key := newTestKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".pem"), dir: dir}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue signs a certificate for name, a server's (for 127.0.0.1 and
// localhost) or a client's, and returns the files of it and its key.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newTestKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("create certificate %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key %s: %v", name, err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// withCtl returns a copy of s that runs etcdctl with other TLS flags and
// endpoint, to play a different client. Only its etcdctl methods may be used.
func (s *server) withCtl(endpoint string, ctlArgs ...string) *server {
	return &server{addr: s.addr, endpoint: endpoint, etcdctl: s.etcdctl, ctlArgs: ctlArgs}
}

func certPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pemBytes, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s holds no certificate", file)
	}
	return pool
}

func keyPair(t *testing.T, certFile, keyFile string) []tls.Certificate {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("load %s: %v", certFile, err)
	}
	return []tls.Certificate{cert}
}

// handshake connects to addr over TLS as an HTTP/2 client and returns the
// first error: of the handshake, or of the first read, since a TLS 1.3
// server judges the client certificate after the client has finished its
// handshake. Nil means the server answered the HTTP/2 preface.
func handshake(addr string, roots *x509.CertPool, certs []tls.Certificate) error {
	cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	if len(certs) > 0 {
		// Present the certificate even when the server names other CAs,
		// so the server has to judge it.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: waitFor}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(waitFor)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// refusedClientFlags make etcdctl give up soon on a server that will never
// accept it: a refused handshake only ends at the dial deadline.
var refusedClientFlags = []string{"--dial-timeout=2s", "--command-timeout=2s"}

func TestSqlkube_TLS(t *testing.T) {
	etcdctlPath(t)
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	serverCert, serverKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	other := newTestCA(t, dir, "other-ca")
	otherCert, otherKey := other.issue(t, "other-client", x509.ExtKeyUsageClientAuth)

	t.Run("client-cert-auth", func(t *testing.T) {
		s := startServerWith(t, serverConfig{
			dsn:     sqliteDSN(t),
			args:    []string{"--cert-file=" + serverCert, "--key-file=" + serverKey, "--trusted-ca-file=" + ca.file, "--client-cert-auth"},
			tls:     true,
			ctlArgs: []string{"--cacert=" + ca.file, "--cert=" + clientCert, "--key=" + clientKey},
		})
		putAll(t, s, "tls/a", "1", "tls/b", "2")
		wantOutput(t, "get over TLS", s.ctl(t, "get", "tls/", "--prefix"), "tls/a", "1", "tls/b", "2")
		// MemberList advertises the https URL.
		if out := s.ctl(t, "member", "list"); !strings.Contains(out, ", https://"+s.addr+", https://"+s.addr+",") {
			t.Errorf("member list over TLS: %q, want the https client URL", out)
		}

		// The handshake itself says why each client is turned away.
		roots, otherRoots := certPool(t, ca.file), certPool(t, other.file)
		good, foreign := keyPair(t, clientCert, clientKey), keyPair(t, otherCert, otherKey)
		if err := handshake(s.addr, roots, good); err != nil {
			t.Errorf("TLS handshake with a client certificate of the CA: %v", err)
		}
		for _, c := range []struct {
			name  string
			roots *x509.CertPool
			certs []tls.Certificate
			want  string // in the handshake's error
		}{
			{"no client certificate", roots, nil, "tls: certificate required"},
			{"client certificate of another CA", roots, foreign, "tls: unknown certificate authority"},
			{"client trusting another CA", otherRoots, good, "certificate signed by unknown authority"},
		} {
			if err := handshake(s.addr, c.roots, c.certs); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: TLS handshake: %v, want an error with %q", c.name, err, c.want)
			}
		}
		for _, c := range []struct {
			name   string
			client *server
		}{
			{"no client certificate", s.withCtl(s.endpoint, "--cacert="+ca.file)},
			{"client certificate of another CA", s.withCtl(s.endpoint, "--cacert="+ca.file, "--cert="+otherCert, "--key="+otherKey)},
			{"client trusting another CA", s.withCtl(s.endpoint, "--cacert="+other.file, "--cert="+clientCert, "--key="+clientKey)},
			{"plaintext client", s.withCtl(s.addr)},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel() // each waits out its deadline
				out, errOut, err := c.client.run(t, "", append([]string{"put", "tls/denied", c.name}, refusedClientFlags...)...)
				if err == nil {
					t.Errorf("etcdctl put succeeded, want it refused\nstdout: %s\nstderr: %s", out, errOut)
				}
			})
		}
		t.Cleanup(func() {
			// After the parallel subtests: whatever the refused clients
			// printed, none of them wrote.
			wantOutput(t, "get after refused clients", s.ctl(t, "get", "tls/denied"))
		})
	})

	t.Run("server-only", func(t *testing.T) {
		s := startServerWith(t, serverConfig{
			dsn:     sqliteDSN(t),
			args:    []string{"--cert-file=" + serverCert, "--key-file=" + serverKey},
			tls:     true,
			ctlArgs: []string{"--cacert=" + ca.file},
		})
		putAll(t, s, "tls/a", "1")
		wantOutput(t, "get over TLS", s.ctl(t, "get", "tls/a"), "tls/a", "1")
		if err := handshake(s.addr, certPool(t, ca.file), nil); err != nil {
			t.Errorf("TLS handshake without a client certificate: %v", err)
		}
		// A client certificate is not asked for, but does no harm.
		withCert := s.withCtl(s.endpoint, "--cacert="+ca.file, "--cert="+clientCert, "--key="+clientKey)
		wantOutput(t, "get with a client certificate", withCert.ctl(t, "get", "tls/a"), "tls/a", "1")
		if out, errOut, err := s.withCtl(s.endpoint, "--cacert="+other.file).run(t, "", append([]string{"get", "tls/a"}, refusedClientFlags...)...); err == nil {
			t.Errorf("etcdctl trusting another CA succeeded, want it refused\nstdout: %s\nstderr: %s", out, errOut)
		}
	})

	t.Run("off-host", func(t *testing.T) {
		dsn := sqliteDSN(t)
		const fix = "--cert-file, --key-file, --trusted-ca-file and --client-cert-auth"
		for _, flags := range [][]string{
			nil,
			{"--cert-file=" + serverCert, "--key-file=" + serverKey},
			{"--cert-file=" + serverCert, "--key-file=" + serverKey, "--trusted-ca-file=" + ca.file},
		} {
			wantStartError(t, append([]string{"etcd", "--listen-address=0.0.0.0:0", "--datastore=" + dsn}, flags...), "refusing", fix, "loopback")
		}
		s := startServerWith(t, serverConfig{
			dsn: dsn, listenHost: "0.0.0.0",
			args:    []string{"--cert-file=" + serverCert, "--key-file=" + serverKey, "--trusted-ca-file=" + ca.file, "--client-cert-auth"},
			tls:     true,
			ctlArgs: []string{"--cacert=" + ca.file, "--cert=" + clientCert, "--key=" + clientKey},
		})
		putAll(t, s, "offhost/a", "1")
		wantOutput(t, "get with a client certificate", s.ctl(t, "get", "offhost/a"), "offhost/a", "1")
		if out, errOut, err := s.withCtl(s.endpoint, "--cacert="+ca.file).run(t, "", append([]string{"get", "offhost/a"}, refusedClientFlags...)...); err == nil {
			t.Errorf("etcdctl without a client certificate succeeded, want it refused\nstdout: %s\nstderr: %s", out, errOut)
		}
	})

	t.Run("flag-misuse", func(t *testing.T) {
		dsn := sqliteDSN(t)
		for _, c := range []struct {
			flags []string
			want  string
		}{
			{[]string{"--cert-file=" + serverCert, "--key-file=" + serverKey, "--client-cert-auth"}, "--client-cert-auth needs --trusted-ca-file"},
			{[]string{"--cert-file=" + serverCert}, "--cert-file and --key-file go together"},
			{[]string{"--key-file=" + serverKey}, "--cert-file and --key-file go together"},
			{[]string{"--client-cert-auth", "--trusted-ca-file=" + ca.file}, "need --cert-file and --key-file"},
			{[]string{"--cert-file=" + serverCert, "--key-file=" + clientKey}, "private key does not match public key"},
			{[]string{"--cert-file=" + serverCert, "--key-file=" + serverKey, "--trusted-ca-file=" + serverKey}, "holds no PEM certificate"},
		} {
			args := append([]string{"etcd", "--listen-address=127.0.0.1:0", "--datastore=" + dsn}, c.flags...)
			wantStartError(t, args, c.want)
		}
	})
}
