package hub

import (
	"context"
	"testing"
	"time"
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
