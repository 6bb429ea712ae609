package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	certutil "k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/controlplane"
)

func TestIsLocalListen(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:2379": true, "127.0.0.2:2379": true, "[::1]:2379": true, "localhost:2379": true, "unix:///run/etcd.sock": true,
		"0.0.0.0:2379": false, ":2379": false, "[::]:2379": false, "10.0.0.5:2379": false, "db.example.com:2379": false, "garbage": false,
	} {
		if got := isLocalListen(addr); got != want {
			t.Errorf("isLocalListen(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestRunEtcd_RefusesExposedPlaintext(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		err := runEtcd(context.Background(), &etcdFlags{listen: addr, datastore: "sqlite://" + filepath.Join(t.TempDir(), "db")}, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), "--client-cert-auth") || !strings.Contains(err.Error(), "--trusted-ca-file") {
			t.Fatalf("--listen-address %s without TLS: %v", addr, err)
		}
	}
}

// logLines hands zerolog's JSON lines to a channel.
type logLines chan []byte

func (l logLines) Write(p []byte) (int, error) {
	select {
	case l <- bytes.Clone(p):
	default: // nobody is reading any more
	}
	return len(p), nil
}

// TestServer_EtcdOffHostNeedsClientCerts: `sqlkube server
// --etcd-listen-address 0.0.0.0:0` makes certificates under DATA_DIR/tls
// and serves the etcd API to clients with one, never without.
func TestServer_EtcdOffHostNeedsClientCerts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dataDir := t.TempDir()
	f := &serverFlags{etcdListenAddress: "0.0.0.0:0"}
	f.api = apiFlags{Config: controlplane.Config{DataDir: dataDir, BindAddress: "127.0.0.1", SecurePort: 0, ServiceIPs: "10.96.0.0/12", NodePorts: "30000-32767", DNS: controlplane.DNSConfig{Disable: true}}}
	lines := make(logLines, 1000)
	done := make(chan error, 1)
	go func() { done <- runServer(ctx, f, zerolog.New(lines), io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	var entry struct{ Message, Address, Cacert, Cert, Key string }
	for entry.Message != "serving etcd API" {
		select {
		case line := <-lines:
			entry.Message = ""
			_ = json.Unmarshal(line, &entry)
		case err := <-done:
			t.Fatalf("server exited: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("the etcd API was not served")
		}
	}
	_, port, _ := net.SplitHostPort(entry.Address)
	endpoint := "127.0.0.1:" + port
	if entry.Cacert != filepath.Join(dataDir, "tls", "ca.crt") || entry.Cert == "" || entry.Key == "" {
		t.Fatalf("log names %+v", entry)
	}
	roots, err := certutil.NewPool(entry.Cacert)
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
			TLS: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	pair, err := tls.LoadX509KeyPair(entry.Cert, entry.Key)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if _, err := client(pair).Put(rctx, "/tools/probe", "ok"); err != nil {
		t.Fatalf("put with the tools' client certificate: %v", err)
	}
	nctx, ncancel := context.WithTimeout(ctx, 2*time.Second)
	defer ncancel()
	if _, err := client().Get(nctx, "/registry/", clientv3.WithPrefix()); err == nil {
		t.Fatal("a client without a certificate read the store")
	}
}
