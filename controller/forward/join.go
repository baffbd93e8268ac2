package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// copyBuffer is the size of each direction's copy buffer, and the most bytes one bandwidth wait
// asks for.
const copyBuffer = 64 << 10

// closeWriter is a connection whose writing half closes alone (TCP, yamux streams, and the
// hijacked HTTP connections of a port-forward).
type closeWriter interface{ CloseWrite() error }

// Join copies a↔b until both directions end, then closes both. A direction that ends cleanly
// half-closes its destination, so the other direction goes on (a client that shut down its
// writing half still gets the whole answer); a direction that fails, or ctx ending, cuts both.
// Bytes are paced by g's bandwidth budget (g may be nil).
func Join(ctx context.Context, a, b net.Conn, g *Grant) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cut := func() {
		_ = a.Close()
		_ = b.Close()
		// A read blocked on a half whose peer never ends otherwise holds the join.
		now := time.Now()
		_ = a.SetReadDeadline(now)
		_ = b.SetReadDeadline(now)
	}
	stop := context.AfterFunc(ctx, cut)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- oneWay(ctx, b, a, g) }()
	err := oneWay(ctx, a, b, g)
	if err != nil {
		cancel()
	}
	if err := <-done; err != nil {
		cancel()
	}
	_ = a.Close()
	_ = b.Close()
}

// oneWay copies src to dst and half-closes dst at src's end.
func oneWay(ctx context.Context, dst, src net.Conn, g *Grant) error {
	buf := make([]byte, copyBuffer)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if err := g.Wait(ctx, n); err != nil {
				return err
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			if cw, ok := dst.(closeWriter); ok {
				return cw.CloseWrite()
			}
			return dst.Close()
		}
		if rerr != nil {
			return rerr
		}
	}
}
