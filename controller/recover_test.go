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

// disconnected stops ws's runner and waits until the store records its allocation disconnected.
func (tc *testController) disconnected(t *testing.T, ws liveWorkspace) store.Allocation {
	t.Helper()
	ws.stop()
	eventually(t, "the runner disconnects", func() bool {
		return tc.allocState(t, ws.allocationID).State == store.AllocDisconnected
	})
	return tc.allocState(t, ws.allocationID)
}

func eventCount(t *testing.T, tc *testController, wsID string) int {
	t.Helper()
	evs, err := tc.s.store.ListEvents(context.Background(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

func stateOf(t *testing.T, tc *testController, wsID string) api.WorkspaceState {
	t.Helper()
	ws, err := tc.s.store.GetWorkspace(context.Background(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	return ws.State
}

// A runner that is not connected is no loss: only the provider's answer is, and a provider that
// cannot be asked (here: no plugin at all) gives none. The workspace stays ready.
func TestDisconnectIsNotALoss(t *testing.T) {
	tc := newTestController(t)
	ws := tc.liveWorkspace(t, "quiet")
	tc.disconnected(t, ws)
	if err := tc.s.upkeepOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, tc, ws.workspaceID); st != api.StateReady {
		t.Fatalf("a disconnected runner made the workspace %s", st)
	}
}

// The loss is recorded as the provider reported it: the workspace lost with the reason, the
// event naming the last receipt and the runs that were active, those runs failed, the
// allocation destroyed (its runner is never admitted again) and the epoch bumped.
func TestLoseWorkspaceRecordsWhatIsLost(t *testing.T) {
	tc := newTestController(t)
	ctx := context.Background()
	live := tc.liveWorkspace(t, "doomed")
	writeFile(t, live.root, "saved.txt", "kept")
	ws, err := tc.s.workspace(ctx, live.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tc.s.captureWorkspace(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	run := api.Run{ID: newID("run_"), WorkspaceID: ws.ID, AllocationID: ws.AllocationID, Argv: []string{"make"},
		State: api.RunRunning, StartedAt: time.Now()}
	if err := tc.s.store.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	a := tc.disconnected(t, live)
	ws, _ = tc.s.store.GetWorkspace(ctx, ws.ID)
	epoch := ws.Epoch
	if err := tc.s.loseWorkspace(ctx, ws, a, "no container"); err != nil {
		t.Fatal(err)
	}
	got, _ := tc.s.store.GetWorkspace(ctx, ws.ID)
	if got.State != api.StateLost || !strings.Contains(got.Reason, "destroyed outside Tether (no container)") || got.Epoch <= epoch {
		t.Fatalf("after the loss: %+v", got)
	}
	var lose api.Event
	evs, _ := tc.s.store.ListEvents(ctx, ws.ID)
	for _, e := range evs {
		if e.To == api.StateLost && e.From != api.StateLost {
			lose = e
		}
	}
	for _, want := range []string{"unsaved changes since receipt " + snap.ID, "active runs failed: " + run.ID, a.ID} {
		if !strings.Contains(lose.Cause, want) {
			t.Fatalf("the lose event %q does not say %q", lose.Cause, want)
		}
	}
	r, _ := tc.s.store.GetRun(ctx, run.ID)
	if r.State != api.RunFailed || !strings.Contains(r.Error, "destroyed outside Tether") {
		t.Fatalf("the active run after the loss: %+v", r)
	}
	if st := tc.allocState(t, a.ID).State; st != store.AllocDestroyed {
		t.Fatalf("the lost allocation is %s", st)
	}
	// A second report of the same loss changes nothing.
	if err := tc.s.loseWorkspace(ctx, ws, a, "no container"); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("a second loss: %v; want conflict", err)
	}
}

// Refusals change nothing: a workspace that is not lost, a receipt of another workspace, a
// workspace with no receipt without --empty, a bad note.
func TestRecoverRefusals(t *testing.T) {
	tc := newTestController(t)
	ctx := context.Background()
	other := tc.liveWorkspace(t, "other")
	writeFile(t, other.root, "x", "x")
	ows, _ := tc.s.workspace(ctx, other.workspaceID)
	foreign, err := tc.s.captureWorkspace(ctx, ows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.RecoverWorkspace(ctx, other.workspaceID, api.RecoverRequest{}); protocol.CodeOf(err) != protocol.CodeConflict ||
		!strings.Contains(err.Error(), "only a lost workspace is recovered") {
		t.Fatalf("recover of a ready workspace: %v; want conflict", err)
	}

	live := tc.liveWorkspace(t, "bare")
	a := tc.disconnected(t, live)
	ws, _ := tc.s.store.GetWorkspace(ctx, live.workspaceID)
	if err := tc.s.loseWorkspace(ctx, ws, a, "gone"); err != nil {
		t.Fatal(err)
	}
	before := eventCount(t, tc, ws.ID)
	for name, tt := range map[string]struct {
		req  api.RecoverRequest
		code protocol.Code
		says string
	}{
		"another workspace's receipt": {api.RecoverRequest{From: foreign.ID}, protocol.CodeInvalidArgument, "receipt of workspace " + ows.ID},
		"an unknown receipt":          {api.RecoverRequest{From: "snap_missing"}, protocol.CodeNotFound, ""},
		"no receipt, no --empty":      {api.RecoverRequest{}, protocol.CodeConflict, "--empty"},
		"--empty with --from":         {api.RecoverRequest{From: foreign.ID, Empty: true}, protocol.CodeInvalidArgument, "exclude"},
		"a note with a newline":       {api.RecoverRequest{Empty: true, Note: "ok\nforged event"}, protocol.CodeInvalidArgument, "control"},
		"a note too long":             {api.RecoverRequest{Empty: true, Note: strings.Repeat("n", maxRecoverNote+1)}, protocol.CodeInvalidArgument, "at most"},
	} {
		_, err := tc.s.RecoverWorkspace(ctx, ws.ID, tt.req)
		if protocol.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v; want %s saying %q", name, err, tt.code, tt.says)
		}
	}
	if st := stateOf(t, tc, ws.ID); st != api.StateLost {
		t.Fatalf("a refused recover left the workspace %s", st)
	}
	if after := eventCount(t, tc, ws.ID); after != before {
		t.Fatalf("a refused recover recorded %d event(s)", after-before)
	}
	// A closed workspace is told to reopen instead.
	if err := tc.s.store.TransitionWorkspace(ctx, other.workspaceID, wsstate.StartClose, "", "test"); err != nil {
		t.Fatal(err)
	}
	if err := tc.s.store.TransitionWorkspace(ctx, other.workspaceID, wsstate.FinishClose, "", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.RecoverWorkspace(ctx, other.workspaceID, api.RecoverRequest{}); protocol.CodeOf(err) != protocol.CodeConflict ||
		!strings.Contains(err.Error(), "workspace reopen") {
		t.Fatalf("recover of a closed workspace: %v; want conflict pointing at reopen", err)
	}
}
