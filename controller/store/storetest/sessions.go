package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// admits checks which tokens admit a's runner: each of ok is found and may rotate (checked
// without rotating: AllocationBySession / BootstrapAllocation), each of dead is refused.
func admits(t *testing.T, s store.Store, a store.Allocation, what string, ok, dead []string) {
	t.Helper()
	ctx := context.Background()
	find := func(h string) (store.Allocation, error) {
		if h == a.BootstrapHash {
			return s.BootstrapAllocation(ctx, h)
		}
		return s.AllocationBySession(ctx, h)
	}
	for _, h := range ok {
		if got, err := find(h); err != nil || got.ID != a.ID {
			t.Fatalf("%s: token %s: %+v, %v; want it to admit %s", what, h, got, err, a.ID)
		}
	}
	for _, h := range dead {
		_, err := find(h)
		wantCode(t, what+": token "+h, err, protocol.CodeUnauthorized)
		_, err = s.RotateSession(ctx, a.ID, h, "never-"+h)
		wantCode(t, what+": rotation with token "+h, err, protocol.CodeUnauthorized)
	}
}

func rotate(t *testing.T, s store.Store, a store.Allocation, presented, next string) store.Allocation {
	t.Helper()
	got, err := s.RotateSession(context.Background(), a.ID, presented, next)
	if err != nil || got.ID != a.ID || got.WorkspaceID != a.WorkspaceID || got.PendingSessionHash != next || !got.BootstrapUsed {
		t.Fatalf("rotate %s → %s: %+v, %v", presented, next, got, err)
	}
	return got
}

func confirm(t *testing.T, s store.Store, a store.Allocation, h string, want bool) {
	t.Helper()
	ok, err := s.ConfirmSession(context.Background(), a.ID, h)
	if err != nil || ok != want {
		t.Fatalf("confirm %s: %v, %v; want %v", h, ok, err, want)
	}
}

// The life of an allocation's tokens: every rotation issues a pending token; the runner's
// confirmation (or its presenting the pending token) kills the one before; a lost welcome leaves
// the presented token working, so a runner never locks itself out.
func testSessionRotation(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, a := create(t, s, "rotate", base)
	_, other := create(t, s, "bystander", base)
	boot := a.BootstrapHash

	got := rotate(t, s, a, boot, "s1")
	if got.SessionHash != "" {
		t.Fatalf("first rotation confirmed a session: %+v", got)
	}
	admits(t, s, a, "first welcome unconfirmed", []string{boot, "s1"}, nil)
	// The first welcome was lost: the bootstrap token still works, and replaces s1.
	rotate(t, s, a, boot, "s2")
	admits(t, s, a, "second welcome unconfirmed", []string{boot, "s2"}, []string{"s1"})
	confirm(t, s, a, "s1", false)
	confirm(t, s, a, "s2", true)
	if got, _ := s.GetAllocation(ctx, a.ID); got.SessionHash != "s2" || got.PendingSessionHash != "" || !got.BootstrapUsed {
		t.Fatalf("after confirming s2: %+v", got)
	}
	admits(t, s, a, "s2 confirmed", []string{"s2"}, []string{boot, "s1"})
	confirm(t, s, a, "s2", false)

	// A reconnect with s2 whose welcome (s3) was lost, then one whose confirmation was lost.
	rotate(t, s, a, "s2", "s3")
	admits(t, s, a, "s3 pending", []string{"s2", "s3"}, []string{boot})
	rotate(t, s, a, "s2", "s4")
	admits(t, s, a, "s3 lost", []string{"s2", "s4"}, []string{"s3"})
	got = rotate(t, s, a, "s4", "s5") // s4 arrived: presenting it confirms it
	if got.SessionHash != "s4" {
		t.Fatalf("presenting the pending token did not confirm it: %+v", got)
	}
	admits(t, s, a, "s4 presented", []string{"s4", "s5"}, []string{"s2", "s3", boot})
	confirm(t, s, a, "s5", true)
	admits(t, s, a, "s5 confirmed", []string{"s5"}, []string{"s4", "s2", boot})

	// A token rotates only its own allocation.
	_, err := s.RotateSession(ctx, other.ID, "s5", "stolen")
	wantCode(t, "a's token on another allocation", err, protocol.CodeUnauthorized)
	_, err = s.RotateSession(ctx, other.ID, boot, "stolen")
	wantCode(t, "a's bootstrap token on another allocation", err, protocol.CodeUnauthorized)
	if got, _ := s.GetAllocation(ctx, other.ID); got.BootstrapUsed || got.SessionHash != "" || got.PendingSessionHash != "" {
		t.Fatalf("another allocation was touched: %+v", got)
	}
	rotate(t, s, other, other.BootstrapHash, "other-1")
}

// Many connections presenting one token at once, each confirming what it got: exactly one
// confirmation wins, and only its token admits the runner afterwards.
func testSessionRotationRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, a := create(t, s, "race", base)
	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	var confirmed, issued []string
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			next := fmt.Sprintf("race-%d", i)
			_, err := s.RotateSession(ctx, a.ID, a.BootstrapHash, next)
			if err != nil {
				if protocol.CodeOf(err) != protocol.CodeUnauthorized {
					t.Errorf("losing rotation: %v; want unauthorized", err)
				}
				return
			}
			ok, err := s.ConfirmSession(ctx, a.ID, next)
			mu.Lock()
			defer mu.Unlock()
			issued = append(issued, next)
			if err != nil {
				t.Errorf("confirm: %v", err)
			} else if ok {
				confirmed = append(confirmed, next)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(confirmed) != 1 {
		t.Fatalf("%d confirmations won (%v of %v issued); want exactly 1", len(confirmed), confirmed, issued)
	}
	got, err := s.GetAllocation(ctx, a.ID)
	if err != nil || got.SessionHash != confirmed[0] || got.PendingSessionHash != "" {
		t.Fatalf("after the race: %+v, %v; want session %s", got, err, confirmed[0])
	}
	var dead []string
	for _, h := range issued {
		if h != confirmed[0] {
			dead = append(dead, h)
		}
	}
	admits(t, s, a, "after the race", []string{confirmed[0]}, append(dead, a.BootstrapHash))
}

func testSessionRefused(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.RotateSession(ctx, "al_missing", "anything", "s1")
	wantCode(t, "unknown allocation", err, protocol.CodeUnauthorized)
	_, a := create(t, s, "refused", base)
	_, err = s.RotateSession(ctx, a.ID, "", "s1")
	wantCode(t, "empty token", err, protocol.CodeUnauthorized)
	_, err = s.RotateSession(ctx, a.ID, "no-such-hash", "s1")
	wantCode(t, "unknown token", err, protocol.CodeUnauthorized)
	if ok, err := s.ConfirmSession(ctx, a.ID, ""); ok || err != nil {
		t.Fatalf("confirming nothing: %v, %v", ok, err)
	}
	if got, _ := s.GetAllocation(ctx, a.ID); got.BootstrapUsed || got.SessionHash != "" || got.PendingSessionHash != "" {
		t.Fatalf("refused rotations changed the allocation: %+v", got)
	}
	for _, state := range []string{store.AllocFailed, store.AllocDestroyed} {
		_, a := create(t, s, "refused-"+state, base)
		rotate(t, s, a, a.BootstrapHash, "p-"+state)
		if err := s.UpdateAllocation(ctx, a.ID, state, "", ""); err != nil {
			t.Fatal(err)
		}
		_, err := s.RotateSession(ctx, a.ID, a.BootstrapHash, "s-"+state)
		wantCode(t, "rotation for a "+state+" allocation", err, protocol.CodeRevoked)
		_, err = s.RotateSession(ctx, a.ID, "p-"+state, "s-"+state)
		wantCode(t, "rotation for a "+state+" allocation", err, protocol.CodeRevoked)
		_, err = s.BootstrapAllocation(ctx, a.BootstrapHash)
		wantCode(t, "bootstrap of a "+state+" allocation", err, protocol.CodeRevoked)
		if ok, err := s.ConfirmSession(ctx, a.ID, "p-"+state); ok || err != nil {
			t.Fatalf("confirmed a session of a %s allocation: %v, %v", state, ok, err)
		}
	}
}

func testAllocationBySession(t *testing.T, s store.Store) {
	ctx := context.Background()
	// An unclaimed allocation has no session: the empty hash must not find it.
	_, unclaimed := create(t, s, "unclaimed", base)
	_, err := s.AllocationBySession(ctx, "")
	wantCode(t, "empty session", err, protocol.CodeUnauthorized)
	_, err = s.AllocationBySession(ctx, "unknown")
	wantCode(t, "unknown session", err, protocol.CodeUnauthorized)
	_, err = s.AllocationBySession(ctx, unclaimed.BootstrapHash)
	wantCode(t, "bootstrap hash used as a session", err, protocol.CodeUnauthorized)

	for _, state := range []string{store.AllocDestroyed, store.AllocFailed} {
		_, a := create(t, s, "session-"+state, base)
		session := "sess-" + state
		rotate(t, s, a, a.BootstrapHash, session)
		confirm(t, s, a, session, true)
		for _, live := range []string{store.AllocConnected, store.AllocDisconnected} {
			if err := s.UpdateAllocation(ctx, a.ID, live, "", ""); err != nil {
				t.Fatal(err)
			}
			got, err := s.AllocationBySession(ctx, session)
			if err != nil || got.ID != a.ID || got.WorkspaceID != a.WorkspaceID || got.State != live {
				t.Fatalf("session of a %s allocation: %+v, %v", live, got, err)
			}
		}
		if err := s.UpdateAllocation(ctx, a.ID, state, "", ""); err != nil {
			t.Fatal(err)
		}
		_, err := s.AllocationBySession(ctx, session)
		wantCode(t, "session of a "+state+" allocation", err, protocol.CodeRevoked)
		// A final state stays: a runner's disconnect recorded late cannot revive the session.
		wantCode(t, state+" allocation made disconnected", s.UpdateAllocation(ctx, a.ID, store.AllocDisconnected, "", ""), protocol.CodeConflict)
		_, err = s.AllocationBySession(ctx, session)
		wantCode(t, "session of a "+state+" allocation after a late disconnect", err, protocol.CodeRevoked)
		if err := s.UpdateAllocation(ctx, a.ID, state, "", ""); err != nil {
			t.Fatalf("%s again: %v", state, err)
		}
	}
	_, failed := create(t, s, "failed-then-destroyed", base)
	for _, state := range []string{store.AllocFailed, store.AllocDestroyed} {
		if err := s.UpdateAllocation(ctx, failed.ID, state, "", ""); err != nil {
			t.Fatalf("a failed allocation made %s: %v", state, err)
		}
	}
}
