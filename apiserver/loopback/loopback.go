package loopback

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
)

// User is who in-process clients act as (the API server's own
// informers, bootstrap and built-in controllers): a member of
// system:masters, as kube-apiserver's loopback client is.
var User = &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

// errClosed is returned by a closed loopback listener.
var errClosed = errors.New("apiserver: loopback listener closed")

// pipeListener is a net.Listener whose connections are in-memory pipes
// made by dial: HTTP, streaming watches included, without a socket.
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- loopbackConn{server}:
		return client, nil
	case <-l.done:
		return nil, errClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "loopback" }

// loopbackConn marks the server side of a loopback connection: requests on
// it act as User.
type loopbackConn struct{ net.Conn }

type loopbackKey struct{}

// IsLoopback reports whether ctx is a request that came over the loopback
// listener.
func IsLoopback(ctx context.Context) bool {
	v, _ := ctx.Value(loopbackKey{}).(bool)
	return v
}

// Start serves h on an in-memory listener and returns a client
// configuration for it (no TLS, no credentials: the connection is the
// credential).
func Start(h http.Handler) (*rest.Config, func()) {
	l := newPipeListener()
	hs := &http.Server{
		Handler: h,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if _, ok := c.(loopbackConn); ok {
				return context.WithValue(ctx, loopbackKey{}, true)
			}
			return ctx
		},
	}
	go func() { _ = hs.Serve(l) }()
	// HTTP/2 without TLS (h2c, prior knowledge): every request and watch
	// of the process's in-memory clients is a stream of one connection,
	// not a connection each with its own goroutines and buffers (a
	// host's tenants hold some hundred watches each). The server takes
	// HTTP/1.1 too.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{DialContext: l.dial, MaxIdleConnsPerHost: 32, Protocols: new(http.Protocols)}
	transport.Protocols.SetUnencryptedHTTP2(true)
	cfg := &rest.Config{
		Host: "http://loopback", Transport: transport,
		QPS:       -1, // no client-side rate limit for the server's own clients
		UserAgent: "sqlkube-loopback",
	}
	return cfg, func() {
		_ = hs.Close()
		transport.CloseIdleConnections()
	}
}
