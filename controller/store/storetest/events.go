package storetest

import (
	"context"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

func testRecordEvent(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "eventful", base)
	if err := s.TransitionWorkspace(ctx, w.ID, wsstate.FinishProvision, "", "runner connected"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordEvent(ctx, w.ID, "second runner refused"); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, w.ID)
	if err != nil || got.State != api.StateReady {
		t.Fatalf("an event changed the workspace: %+v, %v", got, err)
	}
	evs, err := s.ListEvents(ctx, w.ID)
	if err != nil || len(evs) != 3 {
		t.Fatalf("events: %+v, %v", evs, err)
	}
	if e := evs[2]; e.From != api.StateReady || e.To != api.StateReady || e.Cause != "second runner refused" || e.At.IsZero() {
		t.Fatalf("recorded event: %+v", e)
	}
	wantCode(t, "event of a missing workspace", s.RecordEvent(ctx, "ws_missing", "x"), protocol.CodeNotFound)
}

func testEventsAndAllocations(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := create(t, s, "evented", base)
	for _, ev := range []wsstate.Event{wsstate.FinishProvision, wsstate.StartClose, wsstate.FinishClose} {
		tr, _ := wsstate.Lookup(ev)
		if err := s.TransitionWorkspace(ctx, w.ID, ev, "", "to "+string(tr.To)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.ListEvents(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.WorkspaceState{api.StateProvisioning, api.StateReady, api.StateClosing, api.StateClosed}
	if len(evs) != len(want) {
		t.Fatalf("events: %+v", evs)
	}
	for i, e := range evs {
		if e.To != want[i] || (i > 0 && (e.From != want[i-1] || e.Cause != "to "+string(want[i]))) {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	b := a
	b.ID, b.BootstrapHash = a.ID+"-2", a.BootstrapHash+"-2"
	if err := s.AddAllocation(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, w.ID)
	if err != nil || got.AllocationID != b.ID {
		t.Fatalf("current allocation after AddAllocation: %+v, %v", got, err)
	}
	if _, err := s.GetAllocation(ctx, a.ID); err != nil {
		t.Fatalf("the earlier allocation is gone: %v", err)
	}
}
