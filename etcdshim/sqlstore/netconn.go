package sqlstore

import (
	"bufio"
	"context"
	"net"
	"syscall"
)

// readBufferSize is how much a database connection reads from its socket
// at once.
const readBufferSize = 64 << 10

// bufferedConn reads a connection through a buffer of readBufferSize.
// The database drivers read their sockets into small buffers (4 KiB for
// MySQL's, 8 KiB for pgx's), so a range of a few hundred 1 KiB rows cost
// a read system call every few rows.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// SyscallConn exposes the socket, as the connection it wraps does: the MySQL
// driver checks an idle connection's socket for a close by the server
// before it reuses it. An idle connection has nothing left in the buffer:
// every response is read to its end.
func (c *bufferedConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// dialBuffered dials network (tcp or unix) and returns the connection
// reading through a buffer.
func dialBuffered(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return buffered(conn), nil
}

// buffered returns conn reading through a buffer, if it is a socket.
func buffered(conn net.Conn) net.Conn {
	if _, ok := conn.(syscall.Conn); !ok {
		return conn
	}
	return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBufferSize)}
}
