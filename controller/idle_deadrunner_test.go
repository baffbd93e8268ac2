package controller

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
)

// A runner that went away for good leaves its run recorded as running. That record is not
// activity (only a connected runner's runs are): the abandoned workspace, the case idle policies
// exist for, is still taken by its policy.
func TestDeadRunnersRunDoesNotKeepTheWorkspaceAwake(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const after = 10 * time.Minute
	tc := newTestController(t, withClock(fc), idleClose(after))
	ws := tc.liveWorkspace(t, "abandoned")
	ctx := context.Background()
	run := api.Run{ID: newID("run_"), WorkspaceID: ws.workspaceID, AllocationID: ws.allocationID, Argv: []string{"agent"},
		State: api.RunRunning, StartedAt: fc.Now()}
	if err := tc.s.store.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	ws.stop()
	eventually(t, "the runner is gone", func() bool { _, ok := tc.s.hub.Get(ws.allocationID); return !ok })
	d := startIdle(t, tc, fc)
	for range 10 {
		d.advance(after)
	}
	if n := events(t, tc, ws.workspaceID, "idle close"); n == 0 {
		got, _ := tc.s.store.GetWorkspace(ctx, ws.workspaceID)
		t.Fatalf("100 minutes after its runner went away the idle policy never acted (state %s, last activity %v, now %v)",
			got.State, got.LastActivityAt, fc.Now())
	}
}
