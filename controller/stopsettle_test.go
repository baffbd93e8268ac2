package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// A stop cut short after the provider stopped and kept the sandbox (its controller died, or a
// store error ended it) leaves the workspace stopping with its allocation stopped: the upkeep
// finishes it (a new epoch, stopped), once it is clearly nobody's. Without settleStops it would
// stay stopping for good, and only rm would leave it.
func TestUpkeepFinishesAStopCutShort(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	tc := newTestController(t, withClock(fc))
	lw := tc.liveWorkspace(t, "halfway")
	ctx := context.Background()
	moveWS(t, tc, lw.workspaceID, wsstate.StartStop)
	before, err := tc.s.store.GetWorkspace(ctx, lw.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.s.store.StopAllocation(ctx, lw.allocationID, ""); err != nil {
		t.Fatal(err)
	}
	lw.stop()
	// A stop still running is not taken over.
	if err := tc.s.upkeepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tc.state(t, lw.workspaceID); got != api.StateStopping {
		t.Fatalf("the upkeep took over a stop that may still be running: %s", got)
	}
	fc.Advance(2 * time.Minute)
	if err := tc.s.upkeepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := tc.s.store.GetWorkspace(ctx, lw.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != api.StateStopped || after.Epoch <= before.Epoch {
		t.Fatalf("a stop cut short after the provider kept the sandbox: %s, epoch %d (was %d); want stopped under a new epoch",
			after.State, after.Epoch, before.Epoch)
	}
	evs, err := tc.s.store.ListEvents(ctx, lw.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.To != api.StateStopped || !strings.Contains(last.Cause, "finished by the upkeep") {
		t.Fatalf("last event: %+v", last)
	}
}

// A stop whose provider call took 90 s is live: the upkeep does not finish it the instant its
// allocation is stopped (a minute is measured from the allocation's stop, not the workspace's
// start-stop), and when it does finish one, no run is left running on the stopped workspace.
func TestUpkeepLeavesALiveSlowStopAlone(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	tc := newTestController(t, withClock(fc))
	lw := tc.liveWorkspace(t, "slow")
	ctx := context.Background()
	run := api.Run{ID: newID("run_"), WorkspaceID: lw.workspaceID, AllocationID: lw.allocationID, Argv: []string{"make"},
		State: api.RunRunning, StartedAt: time.Now()}
	if err := tc.s.store.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	moveWS(t, tc, lw.workspaceID, wsstate.StartStop)
	fc.Advance(90 * time.Second) // quiesce + digest + provider stop took 90 s
	if err := tc.s.store.StopAllocation(ctx, lw.allocationID, "tree"); err != nil {
		t.Fatal(err)
	}
	lw.stop()
	// The upkeep ticks between the live stop's StopAllocation and its finish-stop.
	if err := tc.s.upkeepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st := tc.state(t, lw.workspaceID)
	r, _ := tc.s.store.GetRun(ctx, run.ID)
	t.Logf("after upkeep: ws %s, run %s", st, r.State)
	if st != api.StateStopping {
		t.Fatalf("the upkeep took over a live stop at its StopAllocation: workspace %s, run %s", st, r.State)
	}
	// The live stop is gone (its controller died): a minute on, the upkeep finishes it.
	fc.Advance(2 * time.Minute)
	if err := tc.s.upkeepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	r, _ = tc.s.store.GetRun(ctx, run.ID)
	if st := tc.state(t, lw.workspaceID); st != api.StateStopped || r.State == api.RunRunning {
		t.Fatalf("a stop cut short, a minute after its allocation stopped: workspace %s, run %s", st, r.State)
	}
}

// A stop's tree digest describes the sandbox only while its allocation is stopped: after a start,
// a later stopping workspace whose runner is gone is not read from the old receipt, and a loss of
// the ready workspace is not reported "nothing unsaved".
func TestStoppedTreeSpeaksOnlyForAStoppedSandbox(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "cycle")
	ctx := context.Background()
	moveWS(t, tc, a.workspaceID, wsstate.FinishProvision, wsstate.StartStop, wsstate.FinishStop)
	if err := tc.s.store.StopAllocation(ctx, a.allocationID, "tree-1"); err != nil {
		t.Fatal(err)
	}
	snap := api.Snapshot{ID: newID("snap_"), WorkspaceID: a.workspaceID, ObjectKey: "k1", CreatedAt: time.Now().UTC(),
		Summary: protocol.SnapshotSummary{Tree: "tree-1"}}
	if err := tc.s.store.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	moveWS(t, tc, a.workspaceID, wsstate.StartStart)
	if err := tc.s.store.RestartAllocation(ctx, a.allocationID, hashToken(newToken(prefixBootstrap)), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := tc.s.store.UpdateAllocation(ctx, a.allocationID, store.AllocDisconnected, "", ""); err != nil {
		t.Fatal(err)
	}
	moveWS(t, tc, a.workspaceID, wsstate.FinishStart)
	// ready now; the sandbox has been worked in since (no receipt).
	al := tc.allocState(t, a.allocationID)
	t.Logf("allocation after start: state %s stopped_tree %q", al.State, al.StoppedTree)
	ws, _ := tc.s.store.GetWorkspace(ctx, a.workspaceID)
	rep, err := tc.s.lossReport(ctx, ws, al, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rep, "nothing unsaved") {
		t.Errorf("the loss of a ready workspace (worked in since its stop) is reported %q", rep)
	}
	// A second stop whose runner is gone: reads while stopping.
	moveWS(t, tc, a.workspaceID, wsstate.StartStop)
	src, err := tc.s.readSource(ctx, a.workspaceID)
	if err == nil && src.snap != nil {
		t.Errorf("a stopping workspace (its sandbox live, holding newer work) is read from receipt %s", src.snap.ID)
	}
}
