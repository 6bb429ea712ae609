package sqlstore

import (
	"bytes"
	"context"
	"io"
	"net"
	"syscall"
	"testing"
)

// TestBufferedConn: a socket is read through the buffer, byte for byte, and
// still exposes its descriptor (the MySQL driver's liveness check needs
// it); a connection that is not a socket is left as it is.
func TestBufferedConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB, five buffers
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(want)
	}()
	conn, err := dialBuffered(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, ok := conn.(*bufferedConn); !ok {
		t.Fatalf("a TCP connection came back as %T, not buffered", conn)
	}
	var got bytes.Buffer
	small := make([]byte, 4096) // the size the MySQL driver reads
	for got.Len() < len(want) {
		n, err := conn.Read(small)
		got.Write(small[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("read %d bytes that differ from the %d written", got.Len(), len(want))
	}
	if _, err := conn.(syscall.Conn).SyscallConn(); err != nil {
		t.Errorf("SyscallConn: %v", err)
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if c := buffered(a); c != a {
		t.Errorf("a pipe was wrapped as %T", c)
	}
}
