package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

func sameWorkspace(t *testing.T, got, want api.Workspace) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Provider != want.Provider || got.State != want.State ||
		got.Reason != want.Reason || got.AllocationID != want.AllocationID || got.Root != want.Root ||
		!got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("workspace = %+v\nwant        %+v", got, want)
	}
}

func ids(ws []api.Workspace) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

func testWorkspaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.ListWorkspaces(ctx, true); err != nil || len(list) != 0 {
		t.Fatalf("empty store lists %v, %v", list, err)
	}
	w1, _ := create(t, s, "alpha", base)
	w2, a2 := create(t, s, "beta", base.Add(time.Second))

	got, err := s.GetWorkspace(ctx, w1.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameWorkspace(t, got, w1)
	if !got.UpdatedAt.Equal(w1.UpdatedAt) {
		t.Fatalf("UpdatedAt = %v; want %v", got.UpdatedAt, w1.UpdatedAt)
	}
	got, err = s.GetWorkspace(ctx, "beta")
	if err != nil {
		t.Fatalf("get by name: %v", err)
	}
	sameWorkspace(t, got, w2)

	// The workspace shows its allocation's root once the runner reported it.
	if err := s.UpdateAllocation(ctx, a2.ID, store.AllocConnected, "/srv/beta", "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	w2.Root = "/srv/beta"
	got, _ = s.GetWorkspace(ctx, w2.ID)
	sameWorkspace(t, got, w2)

	moveTo(t, s, w1.ID, api.StateClosing)
	if err := s.TransitionWorkspace(ctx, w1.ID, wsstate.RefuseClose, "capture failed", "test"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetWorkspace(ctx, w1.ID)
	if got.State != api.StateReady || got.Reason != "capture failed" {
		t.Fatalf("after update: %+v", got)
	}
	if got.UpdatedAt.Before(w1.UpdatedAt) || !got.CreatedAt.Equal(w1.CreatedAt) {
		t.Fatalf("update moved CreatedAt or UpdatedAt backwards: %+v", got)
	}
	if err := s.TransitionWorkspace(ctx, w1.ID, wsstate.StartClose, "", "test"); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.GetWorkspace(ctx, w1.ID); got.State != api.StateClosing || got.Reason != "" {
		t.Fatalf("reason not cleared: %+v", got)
	}

	list, err := s.ListWorkspaces(ctx, false)
	if err != nil || !slices.Equal(ids(list), []string{w1.ID, w2.ID}) {
		t.Fatalf("list = %v, %v; want [%s %s]", ids(list), err, w1.ID, w2.ID)
	}
	if list[1].Root != "/srv/beta" {
		t.Fatalf("listed workspace lacks its root: %+v", list[1])
	}

	// Deleted workspaces are hidden unless all, still found by id, no longer by name.
	if err := s.TransitionWorkspace(ctx, w1.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	if list, _ = s.ListWorkspaces(ctx, false); !slices.Equal(ids(list), []string{w2.ID}) {
		t.Fatalf("live list = %v; want [%s]", ids(list), w2.ID)
	}
	if list, _ = s.ListWorkspaces(ctx, true); !slices.Equal(ids(list), []string{w1.ID, w2.ID}) {
		t.Fatalf("full list = %v; want [%s %s]", ids(list), w1.ID, w2.ID)
	}
	if got, err = s.GetWorkspace(ctx, w1.ID); err != nil || got.State != api.StateDeleted {
		t.Fatalf("deleted workspace by id: %+v, %v", got, err)
	}
	_, err = s.GetWorkspace(ctx, "alpha")
	wantCode(t, "deleted workspace by name", err, protocol.CodeNotFound)
}

func testWorkspaceListOrder(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Inserted out of order, with sub-second and multi-day gaps: the list is oldest first.
	late, _ := create(t, s, "late", base.Add(48*time.Hour))
	mid, _ := create(t, s, "mid", base.Add(1500*time.Millisecond))
	early, _ := create(t, s, "early", base.Add(100*time.Millisecond))
	first, _ := create(t, s, "first", base)
	want := []string{first.ID, early.ID, mid.ID, late.ID}
	for _, all := range []bool{false, true} {
		list, err := s.ListWorkspaces(ctx, all)
		if err != nil || !slices.Equal(ids(list), want) {
			t.Fatalf("list(all=%v) = %v, %v; want %v", all, ids(list), err, want)
		}
	}
}

func testDuplicateName(t *testing.T, s store.Store) {
	ctx := context.Background()
	w1, a1 := create(t, s, "dup", base)
	w2, a2 := Fixture("dup", base.Add(time.Second), "bootstrap-dup-2")
	wantCode(t, "second live workspace with the same name", s.CreateWorkspace(ctx, w2, a2), protocol.CodeExists)
	// Nothing of the refused workspace is left behind.
	_, err := s.GetWorkspace(ctx, w2.ID)
	wantCode(t, "refused workspace", err, protocol.CodeNotFound)
	_, err = s.GetAllocation(ctx, a2.ID)
	wantCode(t, "refused workspace's allocation", err, protocol.CodeNotFound)
	if _, err := s.BootstrapAllocation(ctx, a2.BootstrapHash); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("refused allocation's token is usable: %v", err)
	}
	if _, err := s.RotateSession(ctx, a2.ID, a2.BootstrapHash, "session-dup-2"); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("refused allocation's token is claimable: %v", err)
	}

	// A workspace whose allocation cannot be recorded is not recorded either.
	w4, a4 := Fixture("half", base, "bootstrap-half")
	a4.ID = a1.ID // collides with the first workspace's allocation
	w4.AllocationID = a4.ID
	if err := s.CreateWorkspace(ctx, w4, a4); err == nil {
		t.Fatal("workspace created with an allocation id already in use")
	}
	_, err = s.GetWorkspace(ctx, w4.ID)
	wantCode(t, "workspace whose allocation failed", err, protocol.CodeNotFound)
	_, err = s.GetWorkspace(ctx, "half")
	wantCode(t, "name of a workspace whose allocation failed", err, protocol.CodeNotFound)
	if got, err := s.GetAllocation(ctx, a1.ID); err != nil || got.WorkspaceID != w1.ID || got.BootstrapHash != a1.BootstrapHash {
		t.Fatalf("first allocation after the collision: %+v, %v", got, err)
	}

	// A failed workspace still holds its name.
	if err := s.TransitionWorkspace(ctx, w1.ID, wsstate.FailProvision, "x", "test"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "name of a failed workspace", s.CreateWorkspace(ctx, w2, a2), protocol.CodeExists)

	// A deleted one's name is free again.
	if err := s.TransitionWorkspace(ctx, w1.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, w2, a2); err != nil {
		t.Fatalf("reuse of a deleted workspace's name: %v", err)
	}
	got, err := s.GetWorkspace(ctx, "dup")
	if err != nil || got.ID != w2.ID {
		t.Fatalf("by name after reuse: %+v, %v; want %s", got, err, w2.ID)
	}
	if list, _ := s.ListWorkspaces(ctx, true); !slices.Equal(ids(list), []string{w1.ID, w2.ID}) {
		t.Fatalf("full list = %v", ids(list))
	}
	w3, a3 := Fixture("dup", base.Add(2*time.Second), "bootstrap-dup-3")
	wantCode(t, "third workspace named dup", s.CreateWorkspace(ctx, w3, a3), protocol.CodeExists)
}

func testTransitionWorkspace(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "moving", base)
	if err := s.TransitionWorkspace(ctx, w.ID, wsstate.FinishProvision, "", "runner connected"); err != nil {
		t.Fatal(err)
	}
	err := s.TransitionWorkspace(ctx, w.ID, wsstate.StartReopen, "", "reopen")
	wantCode(t, "transition from the wrong state", err, protocol.CodeConflict)
	if !strings.Contains(err.Error(), string(api.StateReady)) {
		t.Fatalf("conflict does not name the current state: %v", err)
	}
	wantCode(t, "transition of a missing workspace",
		s.TransitionWorkspace(ctx, "ws_missing", wsstate.StartClose, "", "x"), protocol.CodeNotFound)
	wantCode(t, "an event the state machine does not have",
		s.TransitionWorkspace(ctx, w.ID, "resurrect", "", "x"), protocol.CodeInvalidArgument)
	if got, _ := s.GetWorkspace(ctx, w.ID); got.State != api.StateReady {
		t.Fatalf("state after a refused transition: %s", got.State)
	}
	// An event of several from states leaves any of them; the reason is set.
	if err := s.TransitionWorkspace(ctx, w.ID, wsstate.Delete, "disk full", "sweep"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetWorkspace(ctx, w.ID); got.State != api.StateDeleted || got.Reason != "disk full" {
		t.Fatalf("after transition to deleted: %+v", got)
	}
	evs, err := s.ListEvents(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.Event{{To: api.StateProvisioning, Cause: "created"},
		{From: api.StateProvisioning, To: api.StateReady, Cause: "runner connected"},
		{From: api.StateReady, To: api.StateDeleted, Cause: "sweep"}}
	if len(evs) != len(want) {
		t.Fatalf("events = %+v; want %+v (refused transitions record nothing)", evs, want)
	}
	for i, e := range evs {
		if e.From != want[i].From || e.To != want[i].To || e.Cause != want[i].Cause {
			t.Fatalf("event %d = %+v; want %+v", i, e, want[i])
		}
	}
	// A workspace enters the state machine in a state it knows.
	bad, ba := Fixture("unknown-state", base, "bootstrap-unknown-state")
	bad.State = "limbo"
	wantCode(t, "a workspace created in an unknown state", s.CreateWorkspace(ctx, bad, ba), protocol.CodeInvalidArgument)
	if _, err := s.GetWorkspace(ctx, bad.ID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("the refused workspace was recorded: %v", err)
	}
}

// testTransitionRace: 50 reopens of one closed workspace at once, five times over: exactly one
// wins each time, the others are conflicts, and one event is recorded per win.
func testTransitionRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "contended", base)
	const rounds, racers = 5, 50
	for round := range rounds {
		moveTo(t, s, w.ID, api.StateClosed)
		evs, err := s.ListEvents(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		before := len(evs)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []int
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				err := s.TransitionWorkspace(ctx, w.ID, wsstate.StartReopen, "", fmt.Sprintf("racer %d", i))
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					winners = append(winners, i)
				} else if protocol.CodeOf(err) != protocol.CodeConflict {
					t.Errorf("losing transition: %v; want conflict", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d transitions closed→reopening won (%v); want exactly 1", round, len(winners), winners)
		}
		evs, err = s.ListEvents(ctx, w.ID)
		if err != nil || len(evs) == 0 {
			t.Fatalf("events: %v, %v", evs, err)
		}
		last := evs[len(evs)-1]
		if last.From != api.StateClosed || last.To != api.StateReopening || last.Cause != fmt.Sprintf("racer %d", winners[0]) {
			t.Fatalf("round %d: last event %+v; want the winner's closed→reopening", round, last)
		}
		if n := len(evs); n != before+1 { // the winner's reopening, and nothing of the losers
			t.Fatalf("round %d: %d events; want %d", round, n, before+1)
		}
	}
}

// testStateMachine walks wsstate's whole table through the store: in every state, every event
// of the table either makes its transition (when the state is one of its from states) or is
// refused with a conflict that changes nothing — not the state, the reason, the time of the
// last change, nor the events.
func testStateMachine(t *testing.T, s store.Store) {
	ctx := context.Background()
	allowed, refused := 0, 0
	for _, from := range wsstate.States() {
		for _, tr := range wsstate.Table() {
			what := fmt.Sprintf("%s from %s", tr.Event, from)
			w, _ := create(t, s, fmt.Sprintf("sm-%s-%s", from, tr.Event), base)
			moveTo(t, s, w.ID, from)
			before, err := s.GetWorkspace(ctx, w.ID)
			if err != nil || before.State != from {
				t.Fatalf("%s: the walk left %+v, %v", what, before, err)
			}
			evsBefore, err := s.ListEvents(ctx, w.ID)
			if err != nil {
				t.Fatal(err)
			}
			err = s.TransitionWorkspace(ctx, w.ID, tr.Event, "reason: "+string(tr.Event), "cause: "+string(tr.Event))
			got, gerr := s.GetWorkspace(ctx, w.ID)
			if gerr != nil {
				t.Fatal(gerr)
			}
			evs, eerr := s.ListEvents(ctx, w.ID)
			if eerr != nil {
				t.Fatal(eerr)
			}
			if slices.Contains(tr.From, from) {
				allowed++
				if err != nil {
					t.Fatalf("%s: %v; the table allows it", what, err)
				}
				if got.State != tr.To || got.Reason != "reason: "+string(tr.Event) || got.UpdatedAt.Before(before.UpdatedAt) {
					t.Fatalf("%s: workspace %+v; want %s with the reason", what, got, tr.To)
				}
				if len(evs) != len(evsBefore)+1 {
					t.Fatalf("%s: %d events after %d; want one more", what, len(evs), len(evsBefore))
				}
				if last := evs[len(evs)-1]; last.From != from || last.To != tr.To || last.Cause != "cause: "+string(tr.Event) {
					t.Fatalf("%s: event %+v", what, last)
				}
				continue
			}
			refused++
			wantCode(t, what, err, protocol.CodeConflict)
			if !strings.Contains(err.Error(), string(from)) {
				t.Fatalf("%s: the conflict does not name the current state: %v", what, err)
			}
			if got.State != before.State || got.Reason != before.Reason || !got.UpdatedAt.Equal(before.UpdatedAt) {
				t.Fatalf("%s: a refused transition changed the workspace: %+v; was %+v", what, got, before)
			}
			if len(evs) != len(evsBefore) {
				t.Fatalf("%s: a refused transition recorded an event: %+v", what, evs[len(evs)-1])
			}
		}
	}
	want := 0
	for _, tr := range wsstate.Table() {
		want += len(tr.From)
	}
	if allowed != want || refused != len(wsstate.States())*len(wsstate.Table())-want || refused == 0 {
		t.Fatalf("%d transitions made, %d refused; the table has %d", allowed, refused, want)
	}
}

func testWorkspaceReclaimed(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "swept", base)
	other, _ := create(t, s, "unswept", base)
	first, second := base.Add(time.Hour), base.Add(2*time.Hour)
	for _, at := range []time.Time{first, second} { // the latest sweep is what is recorded
		if err := s.SetWorkspaceReclaimed(ctx, w.ID, at); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetWorkspace(ctx, w.ID)
		if err != nil || got.ReclaimedAt == nil || !got.ReclaimedAt.Equal(at) || got.ReclaimedAt.Location() != time.UTC {
			t.Fatalf("after a sweep at %v: %+v, %v", at, got.ReclaimedAt, err)
		}
	}
	list, err := s.ListWorkspaces(ctx, true)
	if err != nil || len(list) != 2 || list[0].ReclaimedAt == nil || list[1].ReclaimedAt != nil || list[1].ID != other.ID {
		t.Fatalf("ListWorkspaces after a sweep: %+v, %v", list, err)
	}
	wantCode(t, "reclaim of a missing workspace", s.SetWorkspaceReclaimed(ctx, "ws_missing", first), protocol.CodeNotFound)
}
