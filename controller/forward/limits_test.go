package forward

import (
	"context"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

func TestLimiterCountsConnectionsPerWorkspace(t *testing.T) {
	l := NewLimiter(Limits{MaxConns: 2})
	a, err := l.Acquire("ws_a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire("ws_a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire("ws_a"); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("third connection: %v, want unavailable", err)
	}
	// Another workspace has its own count.
	other, err := l.Acquire("ws_b")
	if err != nil {
		t.Fatalf("another workspace refused: %v", err)
	}
	a.Release()
	a.Release() // a second release gives nothing back twice
	if n := l.Open("ws_a"); n != 1 {
		t.Fatalf("Open after a release = %d, want 1", n)
	}
	c, err := l.Acquire("ws_a")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.Acquire("ws_a"); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("at the limit again: %v, want unavailable", err)
	}
	b.Release()
	c.Release()
	other.Release()
	if n := l.Open("ws_a"); n != 0 || len(l.open) != 0 {
		t.Fatalf("all released: Open = %d, budgets held %d", n, len(l.open))
	}
}

func TestLimiterDefaults(t *testing.T) {
	l := NewLimiter(Limits{})
	if l.Limits().MaxConns != DefaultMaxConns {
		t.Fatalf("MaxConns = %d", l.Limits().MaxConns)
	}
	g, err := l.Acquire("ws")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	// No bandwidth limit: Wait never blocks, even on a canceled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx, 1<<30); err != nil {
		t.Fatalf("unlimited Wait: %v", err)
	}
	var none *Grant
	if err := none.Wait(ctx, 1); err != nil {
		t.Fatalf("nil grant Wait: %v", err)
	}
}

func TestGrantWaitHonoursContext(t *testing.T) {
	l := NewLimiter(Limits{MaxConns: 1, BytesPerSecond: 1})
	g, err := l.Acquire("ws")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if err := g.Wait(context.Background(), copyBuffer); err != nil {
		t.Fatalf("the first burst: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The bucket is empty and refills at one byte a second: the wait can only end by ctx.
	if err := g.Wait(ctx, 1000); err == nil {
		t.Fatal("Wait past the budget returned without waiting")
	}
}
