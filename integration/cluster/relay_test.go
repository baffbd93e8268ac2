package cluster

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
)

// Expose makes a service of the host that listens on 127.0.0.1 (the test's PostgreSQL and
// MinIO, started by their own helpers or given by TETHER_TEST_* variables) reachable from the
// nodes: a TCP relay listening on the bridge's address, on a port of its own, to target. The
// service sees connections from 127.0.0.1, which its loopback-only configuration accepts (the
// test PostgreSQL trusts 127.0.0.1 alone). It returns the relay's host:port and stops with t.
func (n *Network) Expose(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(n.HostIP, 0).String())
	if err != nil {
		t.Fatalf("relay to %s: %v", target, err)
	}
	r := &relay{l: l, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(r.close)
	r.wg.Go(r.serve)
	return l.Addr().String()
}

type relay struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]bool
}

func (r *relay) serve() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.wg.Go(func() { r.pipe(c) })
	}
}

// pipe relays one connection; a half-close passes through, so a client that shuts its write
// side still reads the answer.
func (r *relay) pipe(c net.Conn) {
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
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Go(func() { copyHalf(up, c) })
	copyHalf(c, up)
	wg.Wait()
}

func (r *relay) track(cs ...net.Conn) bool {
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

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(r.conns, c)
	}
}

// close stops accepting, cuts every relayed connection and waits for the relay's goroutines.
func (r *relay) close() {
	r.l.Close()
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
