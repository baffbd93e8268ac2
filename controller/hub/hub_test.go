package hub

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// A waiter that gives up (a runner that never connects) leaves nothing behind in the hub.
func TestWaitGivesUpCleanly(t *testing.T) {
	h := New()
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if _, err := h.Wait(ctx, "al_never"); err == nil {
			t.Fatal("Wait returned without a connection")
		}
		cancel()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.waiters["al_never"]); n != 0 || len(h.waiters) != 0 {
		t.Fatalf("%d waiters left behind (%d allocations)", n, len(h.waiters))
	}
}

// An Open that dies while writing its request may have delivered it, and says so; one that could
// not even open a stream did not.
func TestOpenSaysWhetherTheRequestMayHaveArrived(t *testing.T) {
	pair := func() (*Conn, *yamux.Session) {
		a, b := net.Pipe()
		srv, err := protocol.MuxServer(a)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := protocol.MuxClient(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(); cli.Close() })
		return NewConn(srv, "al_test", "ws_test", protocol.Hello{}, 1), cli
	}

	closed, _ := pair()
	closed.Close()
	_, err := closed.Open(protocol.OpExec, "run_1", 0, protocol.ExecArgs{Argv: []string{"true"}})
	if err == nil || MaybeSent(err) {
		t.Fatalf("open on a closed session: want a plain error, got %v (maybe sent %v)", err, MaybeSent(err))
	}

	// Too large to send at all: refused before anything is written.
	c, _ := pair()
	_, err = c.Open(protocol.OpExec, "run_2", 0, protocol.ExecArgs{Argv: []string{"echo", strings.Repeat("x", protocol.MaxFrame)}})
	if protocol.CodeOf(err) != protocol.CodeTooLarge || MaybeSent(err) {
		t.Fatalf("an oversized request: want a plain too_large error, got %v (maybe sent %v)", err, MaybeSent(err))
	}

	// A header larger than the stream window (but not than a frame) blocks until the peer reads;
	// the peer's session dies once part of the request reached it. The peer waits for request
	// bytes, not merely for the stream: a close right after the stream's opening frame can beat
	// the opener's own acknowledgement of that frame, and then nothing of the request was sent.
	c, peer := pair()
	big := protocol.ExecArgs{Argv: []string{"echo", strings.Repeat("x", protocol.StreamWindow+protocol.StreamWindow/2)}}
	go func() {
		st, err := peer.AcceptStream()
		if err != nil {
			return
		}
		var length [4]byte
		if _, err := io.ReadFull(st, length[:]); err == nil {
			peer.Close()
		}
	}()
	_, err = c.Open(protocol.OpExec, "run_3", 0, big)
	if !MaybeSent(err) {
		t.Fatalf("open cut mid-request: want a maybe-sent error, got %v", err)
	}
	if protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("open cut mid-request: code %q, want unavailable", protocol.CodeOf(err))
	}
}
