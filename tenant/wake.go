package tenant

import (
	"net"
	"sync/atomic"
)

// wakeListener holds a suspended tenant's port: the first connection
// made to it wakes the tenant, and is then served by it, as every later
// one (handoff gives the listener to the tenant's API with that first
// connection first in line).
type wakeListener struct {
	net.Listener
	woke     chan net.Conn // the first connection
	detached atomic.Bool   // handed over without a wake-up
}

func listenWake(l net.Listener) *wakeListener {
	w := &wakeListener{Listener: l, woke: make(chan net.Conn, 1)}
	go func() {
		c, err := l.Accept()
		switch {
		case err == nil && w.detached.Load():
			// Raced with a resume that took the port: the tenant's own
			// Accept did not get this connection, so close it (the
			// client retries).
			c.Close()
			close(w.woke)
		case err != nil:
			close(w.woke) // closed: the host stopped holding the port
		default:
			w.woke <- c
		}
	}()
	return w
}

// handoff is the listener the woken tenant serves: c first, then the
// port's next connections.
func handoff(l net.Listener, c net.Conn) net.Listener {
	p := &primedListener{Listener: l, first: make(chan net.Conn, 1)}
	p.first <- c
	return p
}

type primedListener struct {
	net.Listener
	first chan net.Conn
}

func (p *primedListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.first:
		return c, nil
	default:
		return p.Listener.Accept()
	}
}

// detach stops waiting for a wake-up without closing the port, which a
// resumed tenant takes over.
func (w *wakeListener) detach() { w.detached.Store(true) }
