package controller

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
)

// A recover whose controller went away after it added the new allocation: the upkeep fails the
// overdue allocation and the workspace is lost again (fail-recover), so a later recover can try
// again; left recovering, nothing but delete would leave it.
func TestOverdueRecoverIsLostAgain(t *testing.T) {
	tc := newTestController(t)
	ctx := context.Background()
	live := tc.liveWorkspace(t, "lostone")
	a := tc.disconnected(t, live)
	ws, _ := tc.s.store.GetWorkspace(ctx, live.workspaceID)
	if err := tc.s.loseWorkspace(ctx, ws, a, "no container"); err != nil {
		t.Fatal(err)
	}
	if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartRecover, "", "recover"); err != nil {
		t.Fatal(err)
	}
	// What rebuild does before the provider's create; then the controller dies.
	past := time.Now().Add(-time.Hour).UTC()
	na := store.Allocation{ID: newID("al_"), WorkspaceID: ws.ID, Provider: "local", State: store.AllocStarting,
		BootstrapHash: hashToken(newToken(prefixBootstrap)), CreatedAt: past, UpdatedAt: past, PlacedOn: "ctl-gone", ReadyBy: past}
	if err := tc.s.store.AddAllocation(ctx, na); err != nil {
		t.Fatal(err)
	}
	if err := tc.s.upkeepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if st := tc.allocState(t, na.ID).State; st != store.AllocFailed {
		t.Fatalf("overdue allocation is %s", st)
	}
	got, _ := tc.s.store.GetWorkspace(ctx, ws.ID)
	if got.State != api.StateLost {
		t.Fatalf("workspace is %s after its recover's allocation failed, want lost (a recover can try again)", got.State)
	}
}
