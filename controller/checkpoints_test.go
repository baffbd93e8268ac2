package controller

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/runner"
	"github.com/tetherhq/tether/sandbox/confine"
)

// liveWorkspace is a ready workspace served by a real runner (in this process, unconfined) on a
// directory of the test's.
type liveWorkspace struct {
	allocation
	root string
	stop func() // disconnects the runner
}

func (tc *testController) liveWorkspace(t *testing.T, name string) liveWorkspace {
	t.Helper()
	return tc.liveWorkspaceIn(t, name, "")
}

// liveWorkspaceIn is liveWorkspace whose runner keeps its state (the capture cache that makes
// captures incremental) in stateDir, when not "".
func (tc *testController) liveWorkspaceIn(t *testing.T, name, stateDir string) liveWorkspace {
	t.Helper()
	a := tc.addAllocation(t, name)
	root := t.TempDir()
	r, err := runner.New(runner.Config{ControllerURL: tc.url, Token: a.token, AllocationID: a.allocationID, Root: root,
		StateDir: stateDir, Version: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Confine: confine.Policy{Mode: protocol.IsolationNone}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			r.Shutdown()
			<-done
		}
	}
	t.Cleanup(stop)
	eventually(t, "the runner connects", func() bool { _, ok := tc.s.hub.Get(a.allocationID); return ok })
	if err := tc.s.store.TransitionWorkspace(context.Background(), a.workspaceID, wsstate.FinishProvision, "", "test"); err != nil {
		t.Fatal(err)
	}
	return liveWorkspace{allocation: a, root: root, stop: stop}
}

func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkpointDriver runs the controller's checkpoint loop on a fake clock, one pass at a time.
type checkpointDriver struct {
	fc     *clockwork.FakeClock
	passes chan struct{}
}

func startCheckpoints(t *testing.T, tc *testController, fc *clockwork.FakeClock) *checkpointDriver {
	t.Helper()
	d := &checkpointDriver{fc: fc, passes: make(chan struct{})}
	tc.s.checkpointPassed = func() { d.passes <- struct{}{} }
	if !tc.s.routines.Go("checkpoint loop", tc.s.checkpointLoop) {
		t.Fatal("checkpoint loop not started")
	}
	<-d.passes // armed
	return d
}

// advance moves the clock by by (at least one tick) and waits for the pass it triggers.
func (d *checkpointDriver) advance(by time.Duration) {
	d.fc.Advance(by)
	<-d.passes
}

func receipts(t *testing.T, tc *testController, wsID string) []api.Snapshot {
	t.Helper()
	list, err := tc.s.store.ListSnapshots(context.Background(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func objects(t *testing.T, tc *testController, wsID string) int {
	t.Helper()
	list, err := tc.s.blobs.List(context.Background(), "snapshots/"+wsID+"/")
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func events(t *testing.T, tc *testController, wsID, prefix string) int {
	t.Helper()
	list, err := tc.s.store.ListEvents(context.Background(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list {
		if strings.HasPrefix(e.Cause, prefix) {
			n++
		}
	}
	return n
}

// A changed tree gets exactly one checkpoint receipt per interval; an unchanged one gets none
// (no receipt, no object); a busy or disconnected workspace is skipped (an event), never failed;
// interval 0 is off.
func TestCheckpointLoop(t *testing.T) {
	// The clock starts well after the workspace's creation (stamped on the wall clock), so the
	// first pass finds it due.
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const every = time.Minute
	tc := newTestController(t, withClock(fc), func(c *Config) { c.CheckpointEvery = every })
	ws := tc.liveWorkspace(t, "cp")
	writeFile(t, ws.root, "a.txt", "one")
	d := startCheckpoints(t, tc, fc)

	d.advance(checkpointTick)
	list := receipts(t, tc, ws.workspaceID)
	if len(list) != 1 || !list[0].Checkpoint {
		t.Fatalf("after the first due pass: receipts %+v; want one checkpoint", list)
	}
	first := list[0]
	got, err := tc.s.workspace(context.Background(), ws.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastCheckpointAt == nil || !got.LastCheckpointAt.Equal(fc.Now().UTC()) || time.Duration(got.CheckpointInterval) != every || got.CheckpointEvery != nil {
		t.Fatalf("workspace after a checkpoint: last %v interval %v own %v; want last %v, interval %v from the default",
			got.LastCheckpointAt, got.CheckpointInterval, got.CheckpointEvery, fc.Now().UTC(), every)
	}

	// Changed, but not due yet: nothing.
	writeFile(t, ws.root, "b.txt", "two")
	d.advance(every / 2)
	if n := len(receipts(t, tc, ws.workspaceID)); n != 1 {
		t.Fatalf("half an interval later: %d receipts; want 1", n)
	}
	// Due: exactly one more, whose parent is the first.
	d.advance(every / 2)
	list = receipts(t, tc, ws.workspaceID)
	if len(list) != 2 || !list[1].Checkpoint || list[1].Parent != first.ID {
		t.Fatalf("one interval later: receipts %+v; want a second checkpoint after %s", list, first.ID)
	}
	// Unchanged: no receipt, no object, only the check time moves.
	objs := objects(t, tc, ws.workspaceID)
	d.advance(every)
	if n := len(receipts(t, tc, ws.workspaceID)); n != 2 {
		t.Fatalf("an unchanged tree made a receipt: %d receipts", n)
	}
	if n := objects(t, tc, ws.workspaceID); n != objs {
		t.Fatalf("an unchanged tree left an object: %d objects, had %d", n, objs)
	}
	if got, _ := tc.s.store.GetWorkspace(context.Background(), ws.workspaceID); got.LastCheckpointAt == nil || !got.LastCheckpointAt.Equal(fc.Now().UTC()) {
		t.Fatalf("unchanged check not recorded: last %v, now %v", got.LastCheckpointAt, fc.Now())
	}

	// Busy (a capture or restore in progress here): skipped, an event, the workspace ready.
	writeFile(t, ws.root, "c.txt", "three")
	release := tc.s.busy.hold(ws.workspaceID)
	d.advance(every)
	release()
	if n := len(receipts(t, tc, ws.workspaceID)); n != 2 {
		t.Fatalf("a busy workspace got a checkpoint: %d receipts", n)
	}
	if n := events(t, tc, ws.workspaceID, "checkpoint skipped: a capture or restore"); n != 1 {
		t.Fatalf("busy skip events: %d; want 1", n)
	}
	// Its next turn is an interval after the skipped one, and takes the change.
	d.advance(every / 2)
	if n := len(receipts(t, tc, ws.workspaceID)); n != 2 {
		t.Fatalf("a checkpoint half an interval after a skipped turn: %d receipts", n)
	}
	d.advance(every / 2)
	if n := len(receipts(t, tc, ws.workspaceID)); n != 3 {
		t.Fatalf("the turn after a skip: %d receipts; want 3", n)
	}

	// Off for this workspace, whatever the default: nothing, however long.
	off := 0 * time.Second
	if err := tc.s.store.SetCheckpointEvery(context.Background(), ws.workspaceID, &off); err != nil {
		t.Fatal(err)
	}
	writeFile(t, ws.root, "d.txt", "four")
	d.advance(3 * every)
	if n := len(receipts(t, tc, ws.workspaceID)); n != 3 {
		t.Fatalf("interval 0 took a checkpoint: %d receipts", n)
	}

	// Disconnected: skipped with an event; the workspace stays ready.
	if err := tc.s.store.SetCheckpointEvery(context.Background(), ws.workspaceID, nil); err != nil {
		t.Fatal(err)
	}
	ws.stop()
	eventually(t, "the runner disconnects", func() bool { _, ok := tc.s.hub.Get(ws.allocationID); return !ok })
	d.advance(every)
	if n := events(t, tc, ws.workspaceID, "checkpoint skipped: the runner is not connected"); n != 1 {
		t.Fatalf("disconnected skip events: %d; want 1", n)
	}
	if got, _ := tc.s.store.GetWorkspace(context.Background(), ws.workspaceID); got.State != api.StateReady {
		t.Fatalf("a skipped checkpoint changed the workspace: %s", got.State)
	}
}

// The interval is checked: below the minimum is refused and changes nothing; 0 turns it off; the
// default can be taken back.
func TestUpdateWorkspaceCheckpointEvery(t *testing.T) {
	tc := newTestController(t, func(c *Config) { c.CheckpointEvery = time.Hour })
	a := tc.addAllocation(t, "upd")
	ctx := context.Background()
	short := protocol.Duration(time.Millisecond)
	if _, err := tc.s.UpdateWorkspace(ctx, a.workspaceID, api.UpdateWorkspaceRequest{CheckpointEvery: &short}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("1ms interval: %v; want invalid_argument", err)
	}
	zero := protocol.Duration(0)
	ws, err := tc.s.UpdateWorkspace(ctx, a.workspaceID, api.UpdateWorkspaceRequest{CheckpointEvery: &zero})
	if err != nil || ws.CheckpointEvery == nil || *ws.CheckpointEvery != 0 || ws.CheckpointInterval != 0 {
		t.Fatalf("off: %+v, %v", ws, err)
	}
	ws, err = tc.s.UpdateWorkspace(ctx, a.workspaceID, api.UpdateWorkspaceRequest{CheckpointDefault: true})
	if err != nil || ws.CheckpointEvery != nil || time.Duration(ws.CheckpointInterval) != time.Hour {
		t.Fatalf("default: %+v, %v", ws, err)
	}
}

// Two controllers sharing a store and a clock: only the one holding the runner's connection
// takes the checkpoint; the other neither captures nor records a skip.
func TestClusterCheckpointOnce(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	a, b := newClusterPair(t, fc)
	const every = 2 * time.Second
	for _, tc := range []*testController{a, b} {
		tc.s.cfg.CheckpointEvery = every
	}
	ws := a.liveWorkspace(t, "cp-cluster")
	writeFile(t, ws.root, "a.txt", "one")
	da, db := startCheckpoints(t, a, fc), startCheckpoints(t, b, fc)
	// step beats both controllers' heartbeats at the current time (each stays alive for the
	// next tick) and runs one pass of each loop.
	step := func() {
		for _, tc := range []*testController{a, b} {
			if err := tc.s.members.Beat(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		fc.Advance(checkpointTick)
		<-da.passes
		<-db.passes
	}
	step()
	if n := len(receipts(t, a, ws.workspaceID)); n != 1 {
		t.Fatalf("first due pass of two controllers: %d receipts; want 1", n)
	}
	writeFile(t, ws.root, "b.txt", "two")
	for range every / checkpointTick {
		step()
	}
	if n := len(receipts(t, a, ws.workspaceID)); n != 2 {
		t.Fatalf("one interval later: %d receipts; want 2", n)
	}
	if n := events(t, a, ws.workspaceID, "checkpoint skipped"); n != 0 {
		t.Fatalf("the controller not holding the runner recorded %d skips", n)
	}
}

// A runner whose tree keeps changing answers every capture changed_during_capture: the
// checkpoint is skipped (an event naming it), nothing is stored, the workspace stays ready, and
// the next try is an interval later.
func TestCheckpointSkipsChangedDuringCapture(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const every = time.Minute
	tc := newTestController(t, withClock(fc), func(c *Config) { c.CheckpointEvery = every })
	al := tc.addAllocation(t, "restless")
	sess, _ := tc.connectOnce(t, al, al.token, true)
	captures := make(chan struct{}, 16)
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			var h protocol.Header
			if protocol.ReadJSON(st, &h) == nil && h.Op == protocol.OpSnapshotCapture {
				captures <- struct{}{}
			}
			_ = protocol.WriteJSON(st, protocol.Trailer{Error: &protocol.Error{Code: protocol.CodeChangedDuringCapture, Message: "a.txt changed while it was read"}})
			st.Close()
		}
	}()
	if err := tc.s.store.TransitionWorkspace(context.Background(), al.workspaceID, wsstate.FinishProvision, "", "test"); err != nil {
		t.Fatal(err)
	}
	d := startCheckpoints(t, tc, fc)
	d.advance(checkpointTick)
	if len(captures) != captureAttempts {
		t.Fatalf("%d capture attempts; want %d", len(captures), captureAttempts)
	}
	if n := len(receipts(t, tc, al.workspaceID)); n != 0 {
		t.Fatalf("%d receipts of a tree that kept changing", n)
	}
	if n := objects(t, tc, al.workspaceID); n != 0 {
		t.Fatalf("%d objects left", n)
	}
	if n := events(t, tc, al.workspaceID, "checkpoint skipped: capture: changed_during_capture"); n != 1 {
		t.Fatalf("changed_during_capture skip events: %d; want 1", n)
	}
	if got, _ := tc.s.store.GetWorkspace(context.Background(), al.workspaceID); got.State != api.StateReady {
		t.Fatalf("the workspace is %s", got.State)
	}
	// Not again until an interval has passed.
	d.advance(every / 2)
	if len(captures) != captureAttempts {
		t.Fatalf("captured again within the interval: %d attempts", len(captures))
	}
}
