// Package testport gives tests a TCP port of the OS's choosing.
package testport

import (
	"net"
	"testing"
)

// Free is a TCP port on 127.0.0.1 that nothing listened on a moment ago.
// Another process may take it before the test binds it.
func Free(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
