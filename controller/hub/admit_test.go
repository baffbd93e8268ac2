package hub

import (
	"net"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Admit refuses while another connection of the allocation is being set up, and only the
// reservation it made is ended by its release.
func TestAdmitOneAtATime(t *testing.T) {
	h := New()
	release, err := h.Admit("al_a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Admit("al_a", time.Second); err != ErrAdmitting {
		t.Fatalf("second Admit: %v; want ErrAdmitting", err)
	}
	other, err := h.Admit("al_b", time.Second)
	if err != nil {
		t.Fatalf("Admit of another allocation: %v", err)
	}
	other()
	release()
	again, err := h.Admit("al_a", time.Second)
	if err != nil {
		t.Fatalf("Admit after release: %v", err)
	}
	release() // a stale release leaves the new reservation alone
	if _, err := h.Admit("al_a", time.Second); err != ErrAdmitting {
		t.Fatalf("Admit after a stale release: %v; want ErrAdmitting", err)
	}
	again()
}

// A registered connection whose runner answers the probe keeps its place; one that does not is
// closed and the newcomer admitted.
func TestAdmitProbesTheLiveConnection(t *testing.T) {
	pair := func(answering bool) *Conn {
		a, b := net.Pipe()
		srv, err := protocol.MuxServer(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(); b.Close() })
		if answering {
			cli, err := protocol.MuxClient(b)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
		} // else nobody reads b: a peer gone silent
		return NewConn(srv, "al_a", "ws_a", protocol.Hello{}, 1)
	}
	h := New()
	live := pair(true)
	release, err := h.Admit("al_a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h.Add(live)
	release()
	if _, err := h.Admit("al_a", time.Second); err != ErrLive {
		t.Fatalf("Admit with a live connection: %v; want ErrLive", err)
	}
	if c, ok := h.Get("al_a"); !ok || c != live {
		t.Fatal("the live connection was dropped by a refused Admit")
	}
	live.Close()

	silent := pair(false)
	h.Add(silent)
	start := time.Now()
	release, err = h.Admit("al_a", 200*time.Millisecond)
	if err != nil {
		t.Fatalf("Admit with a silent connection: %v", err)
	}
	defer release()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the probe took %v", took)
	}
	select {
	case <-silent.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the silent connection was not closed")
	}
}
