package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

func sameProject(t *testing.T, got, want api.Project) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Source != want.Source || got.BaseRef != want.BaseRef ||
		got.Mode != want.Mode || !slices.Equal(got.Provision, want.Provision) || !slices.Equal(got.Teardown, want.Teardown) ||
		got.CreatedAt.Location() != time.UTC || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("project = %+v\nwant      %+v", got, want)
	}
}

func projectIDs(ps []api.Project) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func testProjects(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.ListProjects(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("empty store lists %#v, %v", list, err)
	}
	web := api.Project{ID: "prj_web", Name: "web", Source: "/src/web", BaseRef: "main", Mode: api.ModeIsolated,
		Provision: []string{"npm ci", "echo 'ready' > /tmp/x"}, Teardown: []string{"npm run stop"}, CreatedAt: base.Add(time.Second)}
	api2 := api.Project{ID: "prj_api", Name: "api", Source: "https://example.com/api.git", BaseRef: "trunk",
		Mode: api.ModeShared, CreatedAt: base}
	for _, p := range []api.Project{web, api2} {
		if err := s.CreateProject(ctx, p); err != nil {
			t.Fatalf("CreateProject(%s): %v", p.Name, err)
		}
	}
	for _, key := range []string{web.ID, web.Name} {
		got, err := s.GetProject(ctx, key)
		if err != nil {
			t.Fatalf("GetProject(%s): %v", key, err)
		}
		sameProject(t, got, web)
	}
	got, err := s.GetProject(ctx, api2.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameProject(t, got, api2) // no commands: none come back
	list, err := s.ListProjects(ctx)
	if err != nil || !slices.Equal(projectIDs(list), []string{api2.ID, web.ID}) {
		t.Fatalf("ListProjects = %v, %v; want oldest first [%s %s]", projectIDs(list), err, api2.ID, web.ID)
	}
	sameProject(t, list[1], web)

	// A taken name is refused, and nothing of the refused project is recorded.
	dup := api.Project{ID: "prj_dup", Name: "web", Source: "/elsewhere", BaseRef: "main", Mode: api.ModeShared, CreatedAt: base}
	wantCode(t, "second project named web", s.CreateProject(ctx, dup), protocol.CodeExists)
	_, err = s.GetProject(ctx, dup.ID)
	wantCode(t, "refused project", err, protocol.CodeNotFound)
	if got, _ := s.GetProject(ctx, "web"); got.ID != web.ID || got.Source != web.Source {
		t.Fatalf("web after the refused duplicate: %+v", got)
	}
	_, err = s.GetProject(ctx, "prj_missing")
	wantCode(t, "missing project", err, protocol.CodeNotFound)

	// An id wins over a name that happens to equal it.
	odd := api.Project{ID: "prj_odd", Name: web.ID, Source: "/odd", BaseRef: "main", Mode: api.ModeShared, CreatedAt: base.Add(time.Hour)}
	if err := s.CreateProject(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetProject(ctx, web.ID); err != nil || got.ID != web.ID {
		t.Fatalf("GetProject(%s) with a project of that name: %+v, %v; want the project with that id", web.ID, got, err)
	}
}

// createGit stores a fixture workspace of project on branch, in state, and returns it.
func createGit(t *testing.T, s store.Store, name, project, branch string, state api.WorkspaceState, at time.Time) api.Workspace {
	t.Helper()
	w, a := Fixture(name, at, fmt.Sprintf("bootstrap-%s-%d", name, seq.Add(1)))
	w.Git = &api.WorkspaceGit{ProjectID: project, Mode: api.ModeShared, Strategy: api.StrategyClone, Branch: branch,
		BaseRef: "main", BaseCommit: strings.Repeat("c0ffee", 6) + "abcd", Provision: []string{"make deps"}}
	ctx := context.Background()
	if err := s.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatalf("CreateWorkspace(%s): %v", name, err)
	}
	if state != w.State {
		moveTo(t, s, w.ID, state)
		w.State = state
	}
	return w
}

func sameGit(t *testing.T, what string, got, want *api.WorkspaceGit) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: git = %+v; want %+v", what, got, want)
	}
	if got == nil {
		return
	}
	if got.ProjectID != want.ProjectID || got.Mode != want.Mode || got.Strategy != want.Strategy || got.Branch != want.Branch ||
		got.BaseRef != want.BaseRef || got.BaseCommit != want.BaseCommit || !slices.Equal(got.Provision, want.Provision) ||
		!slices.Equal(got.Teardown, want.Teardown) {
		t.Fatalf("%s: git = %+v\nwant %+v", what, *got, *want)
	}
}

func testProjectWorkspaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	plain, _ := create(t, s, "plain", base)
	ws := createGit(t, s, "git-one", "prj_a", "tether/one", api.StateProvisioning, base.Add(time.Second))
	got, err := s.GetWorkspace(ctx, ws.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameWorkspace(t, got, ws)
	sameGit(t, "GetWorkspace", got.Git, ws.Git)
	if got.ReclaimedAt != nil {
		t.Fatalf("a new workspace is reclaimed: %+v", got)
	}
	if got, _ := s.GetWorkspace(ctx, plain.ID); got.Git != nil {
		t.Fatalf("a workspace of no project has git %+v", got.Git)
	}
	list, err := s.ListWorkspaces(ctx, false)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListWorkspaces = %v, %v", ids(list), err)
	}
	sameGit(t, "ListWorkspaces", list[1].Git, ws.Git)
	if list[0].Git != nil {
		t.Fatalf("listed workspace of no project has git %+v", list[0].Git)
	}

	// Project a: several workspaces on main and one on a feature branch; project b shares the
	// branch name.
	// (A branch has one live workspace at a time: the failed and deleted ones are made first.)
	failed := createGit(t, s, "git-failed", "prj_a", "main", api.StateFailed, base.Add(5*time.Second))
	createGit(t, s, "git-deleted", "prj_a", "main", api.StateDeleted, base.Add(6*time.Second))
	closed := createGit(t, s, "git-closed", "prj_a", "main", api.StateClosed, base.Add(3*time.Second))
	feature := createGit(t, s, "git-feature", "prj_a", "tether/feature", api.StateReady, base.Add(2*time.Second))
	other := createGit(t, s, "git-other", "prj_b", "main", api.StateReady, base.Add(7*time.Second))

	pw, err := s.ProjectWorkspaces(ctx, "prj_a")
	if want := []string{ws.ID, feature.ID, closed.ID, failed.ID}; err != nil || !slices.Equal(ids(pw), want) {
		t.Fatalf("ProjectWorkspaces(prj_a) = %v, %v; want oldest first without deleted %v", ids(pw), err, want)
	}
	sameGit(t, "ProjectWorkspaces", pw[1].Git, feature.Git)
	if pw, err := s.ProjectWorkspaces(ctx, "prj_b"); err != nil || !slices.Equal(ids(pw), []string{other.ID}) {
		t.Fatalf("ProjectWorkspaces(prj_b) = %v, %v", ids(pw), err)
	}
	for _, p := range []string{"prj_none", ""} {
		if pw, err := s.ProjectWorkspaces(ctx, p); err != nil || pw == nil || len(pw) != 0 {
			t.Fatalf("ProjectWorkspaces(%q) = %#v, %v; want empty", p, ids(pw), err)
		}
	}

	// The newest open workspace on main is the closed one: the failed and deleted ones are newer
	// but do not count.
	open := func(project, branch string) (api.Workspace, bool) {
		t.Helper()
		w, ok, err := s.OpenWorkspaceFor(ctx, project, branch)
		if err != nil {
			t.Fatalf("OpenWorkspaceFor(%s, %s): %v", project, branch, err)
		}
		return w, ok
	}
	if got, ok := open("prj_a", "main"); !ok || got.ID != closed.ID {
		t.Fatalf("open workspace of prj_a on main = %s (ok %v); want %s", got.ID, ok, closed.ID)
	} else {
		sameGit(t, "OpenWorkspaceFor", got.Git, closed.Git)
	}
	if got, ok := open("prj_a", "tether/feature"); !ok || got.ID != feature.ID {
		t.Fatalf("open workspace on the feature branch = %s (ok %v); want %s", got.ID, ok, feature.ID)
	}
	if got, ok := open("prj_b", "main"); !ok || got.ID != other.ID {
		t.Fatalf("open workspace of prj_b = %s (ok %v); want %s", got.ID, ok, other.ID)
	}
	for _, c := range [][2]string{{"prj_a", "nope"}, {"prj_none", "main"}, {"", ""}, {"", "main"}} {
		if got, ok := open(c[0], c[1]); ok {
			t.Fatalf("OpenWorkspaceFor(%q, %q) found %s", c[0], c[1], got.ID)
		}
	}
	// A second live workspace on a branch is refused while one lives (closed counts); once that
	// one is deleted the branch is free, and a failed one gives it back too.
	w2, a2 := Fixture("git-newer", base.Add(8*time.Second), fmt.Sprintf("bootstrap-newer-%d", seq.Add(1)))
	w2.Git = &api.WorkspaceGit{ProjectID: "prj_a", Mode: api.ModeShared, Strategy: api.StrategyClone, Branch: "main", BaseRef: "main"}
	if err := s.CreateWorkspace(ctx, w2, a2); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("a second live workspace on prj_a's main: %v", err)
	}
	if err := s.TransitionWorkspace(ctx, closed.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	newer := createGit(t, s, "git-newer", "prj_a", "main", api.StateProvisioning, base.Add(8*time.Second))
	if got, ok := open("prj_a", "main"); !ok || got.ID != newer.ID {
		t.Fatalf("open workspace on main = %s (ok %v); want %s", got.ID, ok, newer.ID)
	}
	if err := s.TransitionWorkspace(ctx, newer.ID, wsstate.FailProvision, "boom", "test"); err != nil {
		t.Fatal(err)
	}
	if got, ok := open("prj_a", "main"); ok {
		t.Fatalf("open workspace on main with none left open: %s (%s)", got.ID, got.State)
	}
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

func testReclaimSnapshot(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "snapped", base)
	mk := func(id string, at time.Time) api.Snapshot {
		snap := api.Snapshot{ID: id, WorkspaceID: w.ID, Epoch: 1, ObjectKey: "snapshots/" + id, Bytes: 10,
			SHA256: strings.Repeat("ab", 32), CreatedAt: at}
		if err := s.CreateSnapshot(ctx, snap); err != nil {
			t.Fatalf("CreateSnapshot(%s): %v", id, err)
		}
		return snap
	}
	old, cur := mk("snap-old", base), mk("snap-cur", base.Add(time.Second))
	if keys, err := s.SnapshotObjectKeys(ctx); err != nil || len(keys) != 2 {
		t.Fatalf("keys before reclaiming: %v, %v", keys, err)
	}
	if got, _ := s.GetSnapshot(ctx, old.ID); got.ReclaimedAt != nil {
		t.Fatalf("a new receipt is reclaimed: %+v", got)
	}
	at := base.Add(time.Hour)
	if err := s.ReclaimSnapshot(ctx, old.ID, at); err != nil {
		t.Fatal(err)
	}
	if err := s.ReclaimSnapshot(ctx, old.ID, at.Add(time.Hour)); err != nil {
		t.Fatalf("second reclaim: %v", err)
	}
	got, err := s.GetSnapshot(ctx, old.ID)
	if err != nil || got.ReclaimedAt == nil || !got.ReclaimedAt.Equal(at) || got.ReclaimedAt.Location() != time.UTC {
		t.Fatalf("reclaimed receipt: %+v, %v; want reclaimed at the first time %v", got.ReclaimedAt, err, at)
	}
	// The receipt stays as history; the sweep no longer keeps its object.
	list, err := s.ListSnapshots(ctx, w.ID)
	if err != nil || len(list) != 2 || list[0].ID != old.ID || list[0].ReclaimedAt == nil || list[1].ReclaimedAt != nil {
		t.Fatalf("ListSnapshots after reclaiming: %+v, %v", list, err)
	}
	keys, err := s.SnapshotObjectKeys(ctx)
	if err != nil || len(keys) != 1 || !keys[cur.ObjectKey] || keys[old.ObjectKey] {
		t.Fatalf("SnapshotObjectKeys = %v, %v; want only %s", keys, err, cur.ObjectKey)
	}
	wantCode(t, "reclaim of a missing receipt", s.ReclaimSnapshot(ctx, "snap-missing", at), protocol.CodeNotFound)
}

func testRunOutput(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := create(t, s, "provisioned", base)
	r := api.Run{ID: "run-prov", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"sh", "-c", "make deps"},
		State: api.RunRunning, StartedAt: base}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	plain := api.Run{ID: "run-plain", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"true"}, State: api.RunRunning, StartedAt: base.Add(time.Second)}
	if err := s.CreateRun(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, r.ID); got.Kind != "" || got.Output != "" {
		t.Fatalf("a new run has kind %q, output %q", got.Kind, got.Output)
	}
	out := strings.Repeat("compiling…\n", 64<<10/12) + "done\n"
	if err := s.SetRunOutput(ctx, r.ID, "provision", out); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || got.Kind != "provision" || got.Output != out || !slices.Equal(got.Argv, r.Argv) || got.State != api.RunRunning {
		t.Fatalf("run after SetRunOutput: kind %q, %d bytes of output (%v); want provision, %d bytes", got.Kind, len(got.Output), err, len(out))
	}
	list, err := s.ListRuns(ctx, w.ID)
	if err != nil || len(list) != 2 || list[0].Kind != "provision" || list[0].Output != out || list[1].Kind != "" || list[1].Output != "" {
		t.Fatalf("ListRuns after SetRunOutput: %v, %v", runIDs(list), err)
	}
	// Finishing keeps the output; a later call replaces it.
	if err := s.FinishRun(ctx, r.ID, api.RunExited, ptr(0), 0, "", base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, r.ID); got.Output != out {
		t.Fatal("FinishRun lost the output")
	}
	if err := s.SetRunOutput(ctx, r.ID, "teardown", "bye\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, r.ID); got.Kind != "teardown" || got.Output != "bye\n" || got.State != api.RunExited {
		t.Fatalf("after a second SetRunOutput: %+v", got)
	}
	// A tail cut inside a character, or binary output, is still kept (as valid UTF-8).
	raw := "\xa6 tail\x00cut\xff\n" + "é"[:1]
	if err := s.SetRunOutput(ctx, r.ID, "provision", raw); err != nil {
		t.Fatalf("output that is not UTF-8: %v", err)
	}
	got, _ = s.GetRun(ctx, r.ID)
	if !utf8.ValidString(got.Output) || strings.ContainsRune(got.Output, 0) || !strings.Contains(got.Output, " tail") ||
		!strings.Contains(got.Output, "cut") {
		t.Fatalf("output that is not UTF-8 came back as %q", got.Output)
	}
	wantCode(t, "output of a missing run", s.SetRunOutput(ctx, "run_missing", "provision", "x"), protocol.CodeNotFound)
}
