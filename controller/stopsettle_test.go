package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
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
