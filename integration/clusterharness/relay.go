package clusterharness

import (
	"net"
	"net/netip"
	"sync"
	"testing"
)

// Expose makes a service of the host that listens on 127.0.0.1 (the test's PostgreSQL and
// MinIO, started by their own helpers or given by TETHER_TEST_* variables) reachable from the
// nodes: a TCP relay listening on the bridge's address, on a port of its own, to target. The
// service sees connections from 127.0.0.1, which its loopback-only configuration accepts (the
// test PostgreSQL trusts 127.0.0.1 alone). The relay stops with t.
func (n *Network) Expose(t testing.TB, target string) *Relay {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(n.HostIP, 0).String())
	if err != nil {
		t.Fatalf("relay to %s: %v", target, err)
	}
	r := &Relay{Addr: l.Addr().String(), l: l, target: target, conns: map[net.Conn]bool{}, gate: &gate{}, done: make(chan struct{})}
	t.Cleanup(r.close)
	r.wg.Go(r.serve)
	return r
}

// A Relay forwards the nodes' connections to a service of the host.
type Relay struct {
	Addr string // host:port the nodes dial

	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]bool
	gate   *gate         // the gate of connections accepted from now on
	done   chan struct{} // closed by close: no gate holds a connection any more
}

// A gate stalls the relaying of the connections it was given to while it is held.
type gate struct {
	mu   sync.Mutex
	held chan struct{} // nil while open; closed on release
}

// wait returns at once while the gate is open, or once it is released or done is closed.
func (g *gate) wait(done <-chan struct{}) {
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-done:
		}
	}
}

// Hold stalls every connection relayed now, in both directions, until release is called (at
// the latest when the test ends): bytes already read are kept until then, and the kernel's
// buffers fill, so a client in the middle of a request waits as behind a stalled network.
// Connections accepted after Hold are relayed as usual — a controller started meanwhile works
// —, so Hold pins down what is in flight (an upload) without stopping the service for others.
func (r *Relay) Hold(t testing.TB) (release func()) {
	r.mu.Lock()
	g := r.gate
	r.gate = &gate{}
	r.mu.Unlock()
	held := make(chan struct{})
	g.mu.Lock()
	g.held = held
	g.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	return release
}

func (r *Relay) serve() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		g := r.gate
		r.mu.Unlock()
		r.wg.Go(func() { r.pipe(c, g) })
	}
}

// pipe relays one connection; a half-close passes through, so a client that shuts its write
// side still reads the answer.
func (r *Relay) pipe(c net.Conn, g *gate) {
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	if !r.track(c, up) {
		return
	}
	defer r.untrack(c, up)
	var wg sync.WaitGroup
	copyHalf := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				g.wait(r.done)
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Go(func() { copyHalf(up, c) })
	copyHalf(c, up)
	wg.Wait()
}

func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = true
	}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(r.conns, c)
	}
}

// close stops accepting, cuts every relayed connection and waits for the relay's goroutines.
func (r *Relay) close() {
	r.l.Close()
	r.mu.Lock()
	r.closed = true
	close(r.done)
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
