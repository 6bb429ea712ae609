// Package testetcd runs a real etcd server (the machine's etcd binary,
// Debian's etcd-server) for tests that move data to and from an etcd
// endpoint.
package testetcd

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sqlkube/sqlkube/internal/testlog"
)

// Start runs etcd on loopback ports the OS picks, with its data in a
// temporary directory, until the test ends, and returns its client
// address (host:port) once it answers. Without an etcd binary it returns
// "" after logging a line that says so, and the caller skips what needs
// it; under CI=true a missing binary fails the test (make test-deps
// installs it).
func Start(t testing.TB, timeout time.Duration) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd binary not found in CI: run 'make test-deps' (Debian's etcd-server)")
		}
		t.Logf("no etcd binary in PATH: what needs etcd is skipped (apt-get install etcd-server, or make test-deps)")
		return ""
	}
	dir := t.TempDir()
	client, peer := freeAddr(t), freeAddr(t)
	var log testlog.Buffer
	cmd := exec.Command(bin, "--name", "default", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "default=http://"+peer)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Status(ctx, client)
		cancel()
		if err == nil {
			return client
		}
		select {
		case err := <-exited:
			t.Fatalf("etcd exited: %v\n%s", err, lastLines(log.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not ready within %s: %v\n%s", timeout, err, lastLines(log.String(), 20))
		}
	}
}

// freeAddr asks the OS for a free loopback port.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
