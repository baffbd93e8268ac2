// Package storetest is the test suite every store.Store driver must pass (SQLite and
// PostgreSQL). A driver's test calls Run with a function opening an empty store.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// Run runs the suite. open returns a new, empty store for each subtest that reads the time from
// clock (a fake clock: only the tests that need time to pass advance it); Run closes the store
// when the subtest ends (cleanups open registers itself run after that Close).
func Run(t *testing.T, open func(t *testing.T, clock clockwork.Clock) store.Store) {
	tests := []struct {
		name string
		fn   suiteTest
	}{
		{"Workspaces", plain(testWorkspaces)},
		{"WorkspaceListOrder", plain(testWorkspaceListOrder)},
		{"DuplicateName", plain(testDuplicateName)},
		{"Allocations", plain(testAllocations)},
		{"SessionRotation", plain(testSessionRotation)},
		{"SessionRotationRace", plain(testSessionRotationRace)},
		{"SessionRefused", plain(testSessionRefused)},
		{"AllocationBySession", plain(testAllocationBySession)},
		{"RecordEvent", plain(testRecordEvent)},
		{"Runs", plain(testRuns)},
		{"NotFound", plain(testNotFound)},
		{"Leases", testLeases},
		{"LeaseRace", plain(testLeaseRace)},
		{"EventsAndAllocations", plain(testEventsAndAllocations)},
		{"Artifacts", plain(testArtifacts)},
		{"Services", plain(testServices)},
		{"Projects", plain(testProjects)},
		{"ProjectWorkspaces", plain(testProjectWorkspaces)},
		{"TransitionWorkspace", plain(testTransitionWorkspace)},
		{"TransitionRace", plain(testTransitionRace)},
		{"StateMachine", plain(testStateMachine)},
		{"WorkspaceReclaimed", plain(testWorkspaceReclaimed)},
		{"ReclaimSnapshot", plain(testReclaimSnapshot)},
		{"RunOutput", plain(testRunOutput)},
		{"AllocationInfo", plain(testAllocationInfo)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Now, to the microsecond every SQL database keeps.
			clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Microsecond))
			s := open(t, clock)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s, clock)
		})
	}
}

// suiteTest is one test of the suite, given the store and the fake clock it reads.
type suiteTest func(t *testing.T, s store.Store, clock *clockwork.FakeClock)

// plain makes a suite test of one that leaves the clock alone.
func plain(fn func(t *testing.T, s store.Store)) suiteTest {
	return func(t *testing.T, s store.Store, _ *clockwork.FakeClock) { fn(t, s) }
}

// base is a fixed instant with microsecond precision, which every SQL database keeps.
var base = time.Date(2020, 1, 2, 3, 4, 5, 123456000, time.UTC)

var seq atomic.Int64

// Fixture returns a workspace and its allocation, with unique ids, created at at, and the
// bootstrap hash h.
func Fixture(name string, at time.Time, h string) (api.Workspace, store.Allocation) {
	n := seq.Add(1)
	wsID, allocID := fmt.Sprintf("ws_%s_%d", name, n), fmt.Sprintf("al_%s_%d", name, n)
	w := api.Workspace{ID: wsID, Name: name, Provider: "local", State: api.StateProvisioning,
		AllocationID: allocID, CreatedAt: at, UpdatedAt: at}
	a := store.Allocation{ID: allocID, WorkspaceID: wsID, Provider: "local", State: store.AllocStarting,
		BootstrapHash: h, CreatedAt: at, UpdatedAt: at}
	return w, a
}

// create stores a fixture and returns it; the bootstrap hash is derived from the name.
func create(t *testing.T, s store.Store, name string, at time.Time) (api.Workspace, store.Allocation) {
	t.Helper()
	w, a := Fixture(name, at, fmt.Sprintf("bootstrap-%s-%d", name, seq.Add(1)))
	if err := s.CreateWorkspace(context.Background(), w, a); err != nil {
		t.Fatalf("CreateWorkspace(%s): %v", name, err)
	}
	return w, a
}

// moveTo takes the workspace id from its state to state along a shortest path of the state
// machine's transitions.
func moveTo(t *testing.T, s store.Store, id string, state api.WorkspaceState) {
	t.Helper()
	ctx := context.Background()
	w, err := s.GetWorkspace(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	path, ok := wsstate.Path(w.State, state)
	if !ok {
		t.Fatalf("no path from %s to %s in the state machine", w.State, state)
	}
	for _, ev := range path {
		if err := s.TransitionWorkspace(ctx, id, ev, "", "test: "+string(ev)); err != nil {
			t.Fatalf("%s on the way from %s to %s: %v", ev, w.State, state, err)
		}
	}
}

// wantCode fails unless err carries code.
func wantCode(t *testing.T, what string, err error, code protocol.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error; want %s", what, code)
	}
	if got := protocol.CodeOf(err); got != code {
		t.Fatalf("%s: %v (code %s); want code %s", what, err, got, code)
	}
}

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

func testAllocations(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, a := create(t, s, "alloc", base)
	got, err := s.GetAllocation(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.WorkspaceID != a.WorkspaceID || got.Provider != a.Provider || got.State != store.AllocStarting ||
		got.BootstrapHash != a.BootstrapHash || got.BootstrapUsed || got.SessionHash != "" || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("allocation = %+v\nwant         %+v", got, a)
	}
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocConnected, "/work", "1.0"); err != nil {
		t.Fatal(err)
	}
	// Empty root and version keep what was recorded.
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocDisconnected, "", ""); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetAllocation(ctx, a.ID)
	if got.State != store.AllocDisconnected || got.Root != "/work" || got.RunnerVersion != "1.0" {
		t.Fatalf("after updates: %+v", got)
	}
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocConnected, "/work2", "1.1"); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.GetAllocation(ctx, a.ID); got.Root != "/work2" || got.RunnerVersion != "1.1" {
		t.Fatalf("root/version not replaced: %+v", got)
	}
}

func ptr(n int) *int { return &n }

func runIDs(rs []api.Run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func testRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := create(t, s, "runs", base)
	w2, a2 := create(t, s, "runs2", base)
	mk := func(id string, ws api.Workspace, alloc string, at time.Time) api.Run {
		r := api.Run{ID: id, WorkspaceID: ws.ID, AllocationID: alloc, Argv: []string{"sh", "-c", "echo 'hi there'"},
			Cwd: "sub/dir", State: api.RunRunning, StartedAt: at}
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatalf("CreateRun(%s): %v", id, err)
		}
		return r
	}
	r3 := mk("run-c", w, a.ID, base.Add(3*time.Second))
	r1 := mk("run-a", w, a.ID, base.Add(1*time.Second))
	r2 := mk("run-b", w, a.ID, base.Add(2500*time.Millisecond))
	mk("run-other", w2, a2.ID, base)

	got, err := s.GetRun(ctx, r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r1.ID || got.WorkspaceID != w.ID || got.AllocationID != a.ID || !slices.Equal(got.Argv, r1.Argv) ||
		got.Cwd != r1.Cwd || got.State != api.RunRunning || got.ExitCode != nil || got.FinishedAt != nil ||
		!got.StartedAt.Equal(r1.StartedAt) {
		t.Fatalf("run = %+v\nwant  %+v", got, r1)
	}

	list, err := s.ListRuns(ctx, w.ID)
	if err != nil || !slices.Equal(runIDs(list), []string{r1.ID, r2.ID, r3.ID}) {
		t.Fatalf("ListRuns = %v, %v; want oldest first [run-a run-b run-c]", runIDs(list), err)
	}
	running, err := s.RunningRuns(ctx, a.ID)
	if err != nil || !slices.Equal(runIDs(running), []string{r1.ID, r2.ID, r3.ID}) {
		t.Fatalf("RunningRuns = %v, %v", runIDs(running), err)
	}

	// Exit code 0 is recorded as 0, not as "none".
	end := base.Add(time.Minute)
	if err := s.FinishRun(ctx, r1.ID, api.RunExited, ptr(0), 0, "", end); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetRun(ctx, r1.ID)
	if got.State != api.RunExited || got.ExitCode == nil || *got.ExitCode != 0 || got.FinishedAt == nil || !got.FinishedAt.Equal(end) {
		t.Fatalf("finished run = %+v", got)
	}
	// Killed by a signal: no exit code.
	if err := s.FinishRun(ctx, r2.ID, api.RunExited, nil, 9, "killed", end); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetRun(ctx, r2.ID)
	if got.State != api.RunExited || got.ExitCode != nil || got.Signal != 9 || got.Error != "killed" {
		t.Fatalf("signalled run = %+v", got)
	}
	running, err = s.RunningRuns(ctx, a.ID)
	if err != nil || !slices.Equal(runIDs(running), []string{r3.ID}) {
		t.Fatalf("RunningRuns after finishing two = %v, %v; want [run-c]", runIDs(running), err)
	}
	if running, _ = s.RunningRuns(ctx, a2.ID); !slices.Equal(runIDs(running), []string{"run-other"}) {
		t.Fatalf("RunningRuns(other allocation) = %v", runIDs(running))
	}
	if list, _ = s.ListRuns(ctx, w.ID); !slices.Equal(runIDs(list), []string{r1.ID, r2.ID, r3.ID}) {
		t.Fatalf("finished runs left the list: %v", runIDs(list))
	}
	if list, err = s.ListRuns(ctx, "ws_none"); err != nil || len(list) != 0 {
		t.Fatalf("runs of an unknown workspace: %v, %v", runIDs(list), err)
	}
	if running, err = s.RunningRuns(ctx, "al_none"); err != nil || len(running) != 0 {
		t.Fatalf("running runs of an unknown allocation: %v, %v", runIDs(running), err)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, "present", base)
	_, err := s.GetWorkspace(ctx, "ws_missing")
	wantCode(t, "GetWorkspace", err, protocol.CodeNotFound)
	wantCode(t, "TransitionWorkspace", s.TransitionWorkspace(ctx, "ws_missing", wsstate.FinishProvision, "", "test"), protocol.CodeNotFound)
	_, err = s.GetAllocation(ctx, "al_missing")
	wantCode(t, "GetAllocation", err, protocol.CodeNotFound)
	wantCode(t, "UpdateAllocation", s.UpdateAllocation(ctx, "al_missing", store.AllocConnected, "/x", "v"), protocol.CodeNotFound)
	_, err = s.GetRun(ctx, "run_missing")
	wantCode(t, "GetRun", err, protocol.CodeNotFound)
	wantCode(t, "FinishRun", s.FinishRun(ctx, "run_missing", api.RunExited, ptr(1), 0, "", base), protocol.CodeNotFound)
}
