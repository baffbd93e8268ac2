package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// moveWS takes a workspace along events of the table, as the controller's own code would.
func moveWS(t *testing.T, tc *testController, id string, evs ...wsstate.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := tc.s.store.TransitionWorkspace(context.Background(), id, ev, "", "test"); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
	}
}

// A stop that cannot be carried out is refused before anything changes: no provider to stop the
// sandbox leaves the workspace ready, its runner connected and its events as they were. A stop or
// start of a workspace in another state is a conflict naming it.
func TestStopRefusedChangesNothing(t *testing.T) {
	tc := newTestController(t)
	lw := tc.liveWorkspace(t, "keep")
	ctx := context.Background()
	evs, err := tc.s.store.ListEvents(ctx, lw.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.StopWorkspace(ctx, lw.workspaceID); err == nil {
		t.Fatal("stop without a provider that can stop succeeded")
	}
	ws, err := tc.s.workspace(ctx, lw.workspaceID)
	if err != nil || ws.State != api.StateReady || !ws.Connected {
		t.Fatalf("after a refused stop: %+v, %v", ws, err)
	}
	if after, _ := tc.s.store.ListEvents(ctx, lw.workspaceID); len(after) != len(evs) {
		t.Fatalf("a refused stop recorded events: %+v", after[len(evs):])
	}
	// A start of a ready workspace answers it as it is.
	if got, err := tc.s.StartWorkspace(ctx, lw.workspaceID); err != nil || got.State != api.StateReady {
		t.Fatalf("start of a ready workspace: %+v, %v", got, err)
	}
	// Other states: conflict, the state named.
	other := tc.addAllocation(t, "provisioning")
	for name, fn := range map[string]func(context.Context, string) (api.Workspace, error){
		"stop": tc.s.StopWorkspace, "start": tc.s.StartWorkspace,
	} {
		_, err := fn(ctx, other.workspaceID)
		if protocol.CodeOf(err) != protocol.CodeConflict || !strings.Contains(err.Error(), "is provisioning") {
			t.Fatalf("%s of a provisioning workspace: %v", name, err)
		}
	}
}

// A stopped workspace refuses work with the way out, and its reads serve the last receipt only
// when the stop recorded that receipt's tree.
func TestStoppedWorkspaceRefusesAndReads(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "stopped")
	ctx := context.Background()
	moveWS(t, tc, a.workspaceID, wsstate.FinishProvision, wsstate.StartStop, wsstate.FinishStop)
	if err := tc.s.store.StopAllocation(ctx, a.allocationID, "tree-at-stop"); err != nil {
		t.Fatal(err)
	}
	_, err := tc.s.liveConn(ctx, a.workspaceID)
	if protocol.CodeOf(err) != protocol.CodeConflict || !strings.Contains(err.Error(), `start it with "tether workspace start `+a.workspaceID+`"`) {
		t.Fatalf("work on a stopped workspace: %v", err)
	}
	// No receipt at all: unavailable, naming the start.
	_, err = tc.s.readSource(ctx, a.workspaceID)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || !strings.Contains(err.Error(), "tether workspace start") {
		t.Fatalf("read of a stopped workspace without a receipt: %v", err)
	}
	// A receipt of another tree: still unavailable (the sandbox keeps newer work).
	snap := api.Snapshot{ID: newID("snap_"), WorkspaceID: a.workspaceID, ObjectKey: "k1", CreatedAt: time.Now().UTC(),
		Summary: protocol.SnapshotSummary{Tree: "older-tree"}}
	if err := tc.s.store.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err = tc.s.readSource(ctx, a.workspaceID); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("read of a stopped workspace whose receipt is older than its tree: %v", err)
	}
	// The receipt holds the tree the stop left: it is served.
	same := snap
	same.ID, same.ObjectKey, same.Summary.Tree = newID("snap_"), "k2", "tree-at-stop"
	same.CreatedAt = snap.CreatedAt.Add(time.Second)
	if err := tc.s.store.CreateSnapshot(ctx, same); err != nil {
		t.Fatal(err)
	}
	src, err := tc.s.readSource(ctx, a.workspaceID)
	if err != nil || src.snap == nil || src.snap.ID != same.ID || src.info().Source != protocol.SourceSaved {
		t.Fatalf("read of a stopped workspace whose tree is saved: %+v, %v", src, err)
	}
	// close --check says what close does with it.
	chk, err := tc.s.closeCheck(ctx, mustWorkspace(t, tc, a.workspaceID))
	if err != nil || !chk.Ready || chk.PendingChanges || len(chk.Reasons) == 0 || !strings.Contains(chk.Reasons[0], "starts it first") {
		t.Fatalf("close --check of a stopped workspace: %+v, %v", chk, err)
	}
}

func mustWorkspace(t *testing.T, tc *testController, id string) api.Workspace {
	t.Helper()
	ws, err := tc.s.workspace(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// A start whose runner never connected by the deadline, on a controller that is gone, is failed
// by the upkeep back to stopped: the allocation stopped (not failed: its sandbox holds work), the
// start's bootstrap token refused, the reason recorded.
func TestOverdueStartFailsBackToStopped(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "late")
	ctx := context.Background()
	moveWS(t, tc, a.workspaceID, wsstate.FinishProvision, wsstate.StartStop, wsstate.FinishStop)
	if err := tc.s.store.StopAllocation(ctx, a.allocationID, "tree"); err != nil {
		t.Fatal(err)
	}
	moveWS(t, tc, a.workspaceID, wsstate.StartStart)
	token := newToken(prefixBootstrap)
	if err := tc.s.store.RestartAllocation(ctx, a.allocationID, hashToken(token), tc.s.now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := tc.s.failOverdue(ctx); err != nil {
		t.Fatal(err)
	}
	ws := mustWorkspace(t, tc, a.workspaceID)
	if ws.State != api.StateStopped || !strings.Contains(ws.Reason, "did not connect") {
		t.Fatalf("workspace after an overdue start: %+v", ws)
	}
	if rec := tc.allocState(t, a.allocationID); rec.State != store.AllocStopped || rec.StoppedTree != "tree" {
		t.Fatalf("allocation after an overdue start: %+v", rec)
	}
	if sess, resp := tc.dial(t, token); sess != nil {
		t.Fatal("the overdue start's runner was admitted")
	} else {
		resp.Body.Close()
	}
	// It can be started again: the machine allows it and the allocation takes a new token.
	if err := tc.s.store.RestartAllocation(ctx, a.allocationID, hashToken(newToken(prefixBootstrap)), time.Time{}); err != nil {
		t.Fatalf("restart after a failed start: %v", err)
	}
}
