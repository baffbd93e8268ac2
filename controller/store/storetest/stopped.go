package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// refusedEverywhere checks that no token of hs admits a's runner, by lookup or by rotation.
func refusedEverywhere(t *testing.T, s store.Store, a store.Allocation, what string, hs ...string) {
	t.Helper()
	ctx := context.Background()
	for _, h := range hs {
		if got, err := s.BootstrapAllocation(ctx, h); err == nil {
			t.Fatalf("%s: bootstrap token %s admits %s", what, h, got.ID)
		}
		if got, err := s.AllocationBySession(ctx, h); err == nil {
			t.Fatalf("%s: session token %s admits %s", what, h, got.ID)
		}
		if _, err := s.RotateSession(ctx, a.ID, h, "never-"+h); err == nil {
			t.Fatalf("%s: token %s rotates", what, h)
		}
	}
}

// A stopped allocation admits no runner, whatever token it held, is claimed by no controller,
// and comes back only through RestartAllocation with a new bootstrap token and deadline.
func testStopAllocation(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, a := create(t, s, "stopping", base)
	_, other := create(t, s, "stopping-too", base)
	boot := a.BootstrapHash
	rotate(t, s, a, boot, "s1")
	confirm(t, s, a, "s1", true)
	if err := s.ClaimAllocation(ctx, a.ID, "c1", "/ws", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := s.StopAllocation(ctx, a.ID, "tree-1"); err != nil {
		t.Fatalf("StopAllocation: %v", err)
	}
	got, err := s.GetAllocation(ctx, a.ID)
	if err != nil || got.State != store.AllocStopped || got.StoppedTree != "tree-1" || got.Owner != "" || !got.ReadyBy.IsZero() ||
		got.SessionHash != "" || got.PendingSessionHash != "" || got.BootstrapHash == boot || got.Root != "/ws" {
		t.Fatalf("stopped allocation: %+v, %v", got, err)
	}
	refusedEverywhere(t, s, a, "stopped", boot, "s1")
	wantCode(t, "claim of a stopped allocation", s.ClaimAllocation(ctx, a.ID, "c1", "", ""), protocol.CodeConflict)
	// A second stopped allocation takes a dead bootstrap value of its own (the column is unique).
	if err := s.StopAllocation(ctx, other.ID, ""); err != nil {
		t.Fatalf("StopAllocation(other): %v", err)
	}
	// Stopping again changes the digest only.
	if err := s.StopAllocation(ctx, a.ID, "tree-2"); err != nil {
		t.Fatalf("StopAllocation again: %v", err)
	}
	if got, _ := s.GetAllocation(ctx, a.ID); got.StoppedTree != "tree-2" || got.State != store.AllocStopped {
		t.Fatalf("stopped twice: %+v", got)
	}

	readyBy := base.Add(time.Minute)
	if err := s.RestartAllocation(ctx, a.ID, "boot-2", readyBy); err != nil {
		t.Fatalf("RestartAllocation: %v", err)
	}
	got, err = s.GetAllocation(ctx, a.ID)
	if err != nil || got.State != store.AllocStarting || got.BootstrapHash != "boot-2" || got.BootstrapUsed || !got.ReadyBy.Equal(readyBy) {
		t.Fatalf("restarted allocation: %+v, %v", got, err)
	}
	if over, err := s.OverdueAllocations(ctx, readyBy.Add(time.Second)); err != nil || !containsAlloc(over, a.ID) {
		t.Fatalf("a restarted allocation past its deadline is not overdue: %+v, %v", over, err)
	}
	refusedEverywhere(t, s, a, "restarted", boot, "s1")
	admits(t, s, got, "restarted", []string{"boot-2"}, nil)
	rotate(t, s, got, "boot-2", "s2")
	wantCode(t, "restart of a starting allocation", s.RestartAllocation(ctx, a.ID, "boot-3", readyBy), protocol.CodeConflict)
	if err := s.ClaimAllocation(ctx, a.ID, "c2", "", ""); err != nil {
		t.Fatalf("claim after restart: %v", err)
	}

	// Final states stay final.
	if err := s.UpdateAllocation(ctx, other.ID, store.AllocDestroyed, "", ""); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "stop of a destroyed allocation", s.StopAllocation(ctx, other.ID, ""), protocol.CodeConflict)
	wantCode(t, "restart of a destroyed allocation", s.RestartAllocation(ctx, other.ID, "boot-4", time.Time{}), protocol.CodeConflict)
	wantCode(t, "stop of a missing allocation", s.StopAllocation(ctx, "al_missing", ""), protocol.CodeNotFound)
}

func containsAlloc(list []store.Allocation, id string) bool {
	for _, a := range list {
		if a.ID == id {
			return true
		}
	}
	return false
}
