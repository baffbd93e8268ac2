package storetest

import (
	"context"
	"fmt"
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
		// Workspaces
		{"Workspaces", plain(testWorkspaces)},
		{"WorkspaceListOrder", plain(testWorkspaceListOrder)},
		{"DuplicateName", plain(testDuplicateName)},
		{"TransitionWorkspace", plain(testTransitionWorkspace)},
		{"TransitionRace", plain(testTransitionRace)},
		{"StateMachine", plain(testStateMachine)},
		{"WorkspaceReclaimed", plain(testWorkspaceReclaimed)},
		{"Checkpoints", plain(testCheckpoints)},
		{"Idle", plain(testIdle)},
		{"SetWorkspaceGit", plain(testSetWorkspaceGit)},
		{"WorkspaceSource", plain(testWorkspaceSource)},
		{"WorkspaceParent", plain(testWorkspaceParent)},
		{"EpochsStoreWide", plain(testEpochsStoreWide)},
		// Events
		{"RecordEvent", plain(testRecordEvent)},
		{"EventsAndAllocations", plain(testEventsAndAllocations)},
		// Allocations
		{"Allocations", plain(testAllocations)},
		{"AllocationInfo", plain(testAllocationInfo)},
		{"AllocationOwners", testAllocationOwners},
		{"AllocationPlacement", plain(testAllocationPlacement)},
		{"StopAllocation", plain(testStopAllocation)},
		// Sessions
		{"SessionRotation", plain(testSessionRotation)},
		{"SessionRotationRace", plain(testSessionRotationRace)},
		{"SessionRefused", plain(testSessionRefused)},
		{"AllocationBySession", plain(testAllocationBySession)},
		// Runs
		{"Runs", plain(testRuns)},
		{"RunOutput", plain(testRunOutput)},
		{"RunKeys", plain(testRunKeys)},
		// Snapshots
		{"ReclaimSnapshot", plain(testReclaimSnapshot)},
		{"RemoveSnapshot", plain(testRemoveSnapshot)},
		{"RemoveSnapshotRace", plain(testRemoveSnapshotRace)},
		{"AppendSnapshot", plain(testAppendSnapshot)},
		// Leases
		{"Leases", testLeases},
		{"LeaseRace", plain(testLeaseRace)},
		// Artifacts
		{"Artifacts", plain(testArtifacts)},
		// Services
		{"Services", plain(testServices)},
		// Projects
		{"Projects", plain(testProjects)},
		{"ProjectWorkspaces", plain(testProjectWorkspaces)},
		// Tokens
		{"Tokens", plain(testTokens)},
		{"TokenHashUnique", plain(testTokenHashUnique)},
		// Previews
		{"Previews", plain(testPreviews)},
		// Upload sessions
		{"UploadSessions", plain(testUploadSessions)},
		// Members
		{"Members", testMembers},
		{"ClusterSecret", plain(testClusterSecret)},
		// Coordination
		{"ClusterLock", plain(testClusterLock)},
		{"Uploads", testUploads},
		{"WatchAllocations", plain(testWatchAllocations)},
		{"WatchClosed", plain(testWatchClosed)},
		// Every role's lookups of missing records
		{"NotFound", plain(testNotFound)},
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
	wantCode(t, "FinishRun", s.FinishRun(ctx, store.RunFinish{ID: "run_missing", State: api.RunExited, ExitCode: ptr(1), At: base}), protocol.CodeNotFound)
}
