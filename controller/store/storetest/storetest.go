package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Run runs the suite. open returns a new, empty store for each subtest; Run closes it when the
// subtest ends (cleanups open registers itself run after that Close).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		// Workspaces
		{"Workspaces", testWorkspaces},
		{"WorkspaceListOrder", testWorkspaceListOrder},
		{"DuplicateName", testDuplicateName},
		{"TransitionWorkspace", testTransitionWorkspace},
		{"TransitionRace", testTransitionRace},
		{"WorkspaceReclaimed", testWorkspaceReclaimed},
		// Events
		{"RecordEvent", testRecordEvent},
		{"EventsAndAllocations", testEventsAndAllocations},
		// Allocations
		{"Allocations", testAllocations},
		{"AllocationInfo", testAllocationInfo},
		// Sessions
		{"SessionRotation", testSessionRotation},
		{"SessionRotationRace", testSessionRotationRace},
		{"SessionRefused", testSessionRefused},
		{"AllocationBySession", testAllocationBySession},
		// Runs
		{"Runs", testRuns},
		{"RunOutput", testRunOutput},
		// Snapshots
		{"ReclaimSnapshot", testReclaimSnapshot},
		// Leases
		{"Leases", testLeases},
		{"LeaseRace", testLeaseRace},
		// Artifacts
		{"Artifacts", testArtifacts},
		// Services
		{"Services", testServices},
		// Projects
		{"Projects", testProjects},
		{"ProjectWorkspaces", testProjectWorkspaces},
		// Every role's lookups of missing records
		{"NotFound", testNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
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
	wantCode(t, "UpdateWorkspace", s.UpdateWorkspace(ctx, "ws_missing", api.StateReady, "", "test"), protocol.CodeNotFound)
	_, err = s.GetAllocation(ctx, "al_missing")
	wantCode(t, "GetAllocation", err, protocol.CodeNotFound)
	wantCode(t, "UpdateAllocation", s.UpdateAllocation(ctx, "al_missing", store.AllocConnected, "/x", "v"), protocol.CodeNotFound)
	_, err = s.GetRun(ctx, "run_missing")
	wantCode(t, "GetRun", err, protocol.CodeNotFound)
	wantCode(t, "FinishRun", s.FinishRun(ctx, store.RunFinish{ID: "run_missing", State: api.RunExited, ExitCode: ptr(1), At: base}), protocol.CodeNotFound)
}
