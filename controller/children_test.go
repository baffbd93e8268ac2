package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// saveWait is a waitForSave running in the background.
type saveWait struct {
	done chan struct{}
	snap api.Snapshot
	err  error
}

// startSaveWait starts waiting for the next save of workspace id on behalf of a child called
// child, and returns once the wait is registered (the parent's event says so): anything saved
// from then on must end it.
func startSaveWait(t *testing.T, tc *testController, id, child string, wait time.Duration) *saveWait {
	t.Helper()
	parent, err := tc.s.workspace(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	w := &saveWait{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.snap, w.err = tc.s.waitForSave(context.Background(), parent, child, wait)
	}()
	eventually(t, "the wait registered on the parent", func() bool {
		return hasEvent(t, tc, id, "child "+child+" waits for the next save")
	})
	return w
}

// result waits for the wait to end (a bound against a hang, not a timing assertion).
func (w *saveWait) result(t *testing.T) (api.Snapshot, error) {
	t.Helper()
	select {
	case <-w.done:
		return w.snap, w.err
	case <-time.After(30 * time.Second):
		t.Fatal("the wait for a save did not end")
		return api.Snapshot{}, nil
	}
}

// pending fails the test if the wait already ended.
func (w *saveWait) pending(t *testing.T, when string) {
	t.Helper()
	select {
	case <-w.done:
		t.Fatalf("the wait ended %s: %+v, %v", when, w.snap, w.err)
	default:
	}
}

func hasEvent(t *testing.T, tc *testController, id, cause string) bool {
	t.Helper()
	events, err := tc.s.store.ListEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if strings.Contains(e.Cause, cause) {
			return true
		}
	}
	return false
}

// A wait for the next save ends with the first receipt written after it began, not the one the
// parent had, and makes nothing while it waits.
func TestWaitForSaveTakesTheNextReceipt(t *testing.T) {
	tc := newTestController(t)
	lw := tc.liveWorkspace(t, "parent")
	ctx := context.Background()
	writeFile(t, lw.root, "a.txt", "saved before the wait")
	first, err := tc.s.CaptureSnapshot(ctx, lw.workspaceID, api.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := startSaveWait(t, tc, lw.workspaceID, "kid", time.Minute)
	w.pending(t, "before any save")
	if list, err := tc.s.store.ListWorkspaces(ctx, true); err != nil || len(list) != 1 {
		t.Fatalf("workspaces while waiting: %d, %v; want the parent alone", len(list), err)
	}
	writeFile(t, lw.root, "b.txt", "saved after the wait began")
	second, err := tc.s.CaptureSnapshot(ctx, lw.workspaceID, api.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := w.result(t)
	if err != nil {
		t.Fatal(err)
	}
	if snap.ID != second.ID || snap.ID == first.ID {
		t.Fatalf("the wait returned %s; want the new receipt %s (the old one was %s)", snap.ID, second.ID, first.ID)
	}
	if len(tc.s.signals.m) != 0 {
		t.Fatalf("signals left after the wait: %v", tc.s.signals.m)
	}
}

// A parent deleted, or closed without a new receipt, while a child waits ends the wait with a
// typed refusal, recorded on the parent; a parent that cannot save is refused at once.
func TestWaitForSaveEndsWhenTheParentCannotSave(t *testing.T) {
	tc := newTestController(t)
	ctx := context.Background()
	ready := func(name string) allocation {
		a := tc.addAllocation(t, name)
		if err := tc.s.store.TransitionWorkspace(ctx, a.workspaceID, wsstate.FinishProvision, "", "test"); err != nil {
			t.Fatal(err)
		}
		return a
	}

	gone := ready("gone")
	w := startSaveWait(t, tc, gone.workspaceID, "orphan", time.Minute)
	if err := tc.s.store.TransitionWorkspace(ctx, gone.workspaceID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.result(t); protocol.CodeOf(err) != protocol.CodeConflict || !strings.Contains(err.Error(), "is deleted") {
		t.Fatalf("wait on a parent deleted meanwhile: %v; want conflict, deleted", err)
	}
	if !hasEvent(t, tc, gone.workspaceID, "child orphan stopped waiting") {
		t.Fatal("the end of the wait is not among the parent's events")
	}

	closed := ready("closed")
	w = startSaveWait(t, tc, closed.workspaceID, "late", time.Minute)
	for _, ev := range []wsstate.Event{wsstate.StartClose, wsstate.FinishClose} {
		if err := tc.s.store.TransitionWorkspace(ctx, closed.workspaceID, ev, "", "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.result(t); protocol.CodeOf(err) != protocol.CodeConflict || !strings.Contains(err.Error(), "is closed") {
		t.Fatalf("wait on a parent closed without saving: %v; want conflict, closed", err)
	}
	// Closed already: refused before any wait.
	parent, err := tc.s.workspace(ctx, closed.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.waitForSave(ctx, parent, "never", time.Minute); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("wait on a closed parent: %v; want conflict", err)
	}
	if hasEvent(t, tc, closed.workspaceID, "child never waits") {
		t.Fatal("a refused wait was recorded as waiting")
	}
	if len(tc.s.signals.m) != 0 {
		t.Fatalf("signals left after the waits: %v", tc.s.signals.m)
	}
}

// The wait is bounded on the controller's clock: past it, a timeout, and nothing made.
func TestWaitForSaveTimesOut(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	tc := newTestController(t, withClock(fc))
	ctx := context.Background()
	a := tc.addAllocation(t, "slow")
	if err := tc.s.store.TransitionWorkspace(ctx, a.workspaceID, wsstate.FinishProvision, "", "test"); err != nil {
		t.Fatal(err)
	}
	w := startSaveWait(t, tc, a.workspaceID, "patient", 5*time.Minute)
	fc.Advance(5*time.Minute - time.Second)
	w.pending(t, "before its deadline")
	fc.Advance(time.Second)
	if _, err := w.result(t); protocol.CodeOf(err) != protocol.CodeTimeout {
		t.Fatalf("wait past its deadline: %v; want timeout", err)
	}
	if !hasEvent(t, tc, a.workspaceID, "child patient stopped waiting: workspace "+a.workspaceID+" made no new receipt within 5m0s") {
		t.Fatal("the timeout is not among the parent's events")
	}
}

// A waiter that gives up leaves no entry; a notify wakes every waiter of that workspace only.
func TestWSSignals(t *testing.T) {
	sig := newWSSignals()
	a1, release1 := sig.next("ws_a")
	a2, release2 := sig.next("ws_a")
	b, releaseB := sig.next("ws_b")
	sig.notify("ws_a")
	for i, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d of ws_a not woken", i)
		}
	}
	select {
	case <-b:
		t.Fatal("ws_b woken by a change of ws_a")
	default:
	}
	release1()
	release1() // twice is once
	release2()
	releaseB()
	if len(sig.m) != 0 {
		t.Fatalf("entries left: %v", sig.m)
	}
	// A channel taken after a notify is a new one.
	c, release := sig.next("ws_a")
	defer release()
	select {
	case <-c:
		t.Fatal("a new waiter woken by an old notify")
	default:
	}
}
