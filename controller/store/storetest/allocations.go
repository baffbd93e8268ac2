package storetest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

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

// What a provider said of an allocation's sandbox is kept per allocation and replaced whole.
func testAllocationInfo(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, a := create(t, s, "info", base)
	if got, err := s.AllocationInfo(ctx, a.ID); err != nil || len(got) != 0 {
		t.Fatalf("info before any = %v, %v; want empty", got, err)
	}
	first := map[string]string{"network": "private", "memory": "2048 MiB"}
	if err := s.SetAllocationInfo(ctx, a.ID, first); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AllocationInfo(ctx, a.ID); err != nil || !maps.Equal(got, first) {
		t.Fatalf("info = %v, %v; want %v", got, err, first)
	}
	second := map[string]string{"network": "host"}
	if err := s.SetAllocationInfo(ctx, a.ID, second); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AllocationInfo(ctx, a.ID); err != nil || !maps.Equal(got, second) {
		t.Fatalf("replaced info = %v, %v; want %v", got, err, second)
	}
	wantCode(t, "info of an unknown allocation", s.SetAllocationInfo(ctx, "al_nope", first), protocol.CodeNotFound)
}

// An allocation's owner is the controller that claimed it last, until it is released, disowned,
// or leaves connected; a release by any other controller changes nothing.
func testAllocationOwners(t *testing.T, s store.Store, clock *clockwork.FakeClock) {
	ctx := context.Background()
	_, a := create(t, s, "owned", base)
	_, b := create(t, s, "owned-too", base)
	owner := func(id, want string, since time.Time, state string) {
		t.Helper()
		got, err := s.GetAllocation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != want || !got.OwnerSince.Equal(since) || got.State != state || (!since.IsZero() && got.OwnerSince.Location() != time.UTC) {
			t.Fatalf("allocation %s: owner %q since %v, %s; want %q since %v, %s", id, got.Owner, got.OwnerSince, got.State, want, since, state)
		}
	}
	owner(a.ID, "", time.Time{}, store.AllocStarting)
	// The provider's root is recorded while the allocation starts.
	if err := s.SetStartingRoot(ctx, a.ID, "/provider"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetAllocation(ctx, a.ID); got.Root != "/provider" || got.State != store.AllocStarting {
		t.Fatalf("allocation after SetStartingRoot: %+v", got)
	}

	claimedAt := clock.Now().UTC()
	if err := s.ClaimAllocation(ctx, a.ID, "ctl-1", "/work", "1.0"); err != nil {
		t.Fatal(err)
	}
	owner(a.ID, "ctl-1", claimedAt, store.AllocConnected)
	if got, _ := s.GetAllocation(ctx, a.ID); got.Root != "/work" || got.RunnerVersion != "1.0" || !got.UpdatedAt.Equal(claimedAt) {
		t.Fatalf("claimed allocation: %+v", got)
	}
	// A provider's create that returns after the runner was claimed changes nothing: the claim
	// and the root of the runner's hello stand.
	clock.Advance(time.Second)
	if err := s.SetStartingRoot(ctx, a.ID, "/provider"); err != nil {
		t.Fatal(err)
	}
	owner(a.ID, "ctl-1", claimedAt, store.AllocConnected)
	if got, _ := s.GetAllocation(ctx, a.ID); got.Root != "/work" || !got.UpdatedAt.Equal(claimedAt) {
		t.Fatalf("SetStartingRoot changed a claimed allocation: %+v", got)
	}
	// The runner reconnected to another controller: the latest claim is the owner. Empty root
	// and version keep what was recorded.
	clock.Advance(time.Minute)
	reclaimedAt := clock.Now().UTC()
	if err := s.ClaimAllocation(ctx, a.ID, "ctl-2", "", ""); err != nil {
		t.Fatal(err)
	}
	owner(a.ID, "ctl-2", reclaimedAt, store.AllocConnected)
	if got, _ := s.GetAllocation(ctx, a.ID); got.Root != "/work" || got.RunnerVersion != "1.0" {
		t.Fatalf("claim with empty root and version replaced them: %+v", got)
	}
	// The first controller's late release leaves the second's connection alone.
	if ok, err := s.ReleaseAllocation(ctx, a.ID, "ctl-1"); err != nil || ok {
		t.Fatalf("release by the former owner = %v, %v; want false", ok, err)
	}
	owner(a.ID, "ctl-2", reclaimedAt, store.AllocConnected)
	if ok, err := s.ReleaseAllocation(ctx, a.ID, "ctl-2"); err != nil || !ok {
		t.Fatalf("release by the owner = %v, %v; want true", ok, err)
	}
	owner(a.ID, "", time.Time{}, store.AllocDisconnected)
	if ok, err := s.ReleaseAllocation(ctx, a.ID, "ctl-2"); err != nil || ok {
		t.Fatalf("second release = %v, %v; want false", ok, err)
	}
	if ok, err := s.ReleaseAllocation(ctx, "al_missing", "ctl-2"); err != nil || ok {
		t.Fatalf("release of an unknown allocation = %v, %v; want false", ok, err)
	}

	// UpdateAllocation to connected keeps the owner; to any other state drops it.
	if err := s.ClaimAllocation(ctx, a.ID, "ctl-1", "", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocConnected, "", "1.1"); err != nil {
		t.Fatal(err)
	}
	owner(a.ID, "ctl-1", reclaimedAt, store.AllocConnected)
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocDisconnected, "", ""); err != nil {
		t.Fatal(err)
	}
	owner(a.ID, "", time.Time{}, store.AllocDisconnected)

	// Disown releases every connected allocation of that controller, and only those.
	for _, id := range []string{a.ID, b.ID} {
		if err := s.ClaimAllocation(ctx, id, "ctl-1", "", ""); err != nil {
			t.Fatal(err)
		}
	}
	_, c := create(t, s, "not-mine", base)
	if err := s.ClaimAllocation(ctx, c.ID, "ctl-2", "", ""); err != nil {
		t.Fatal(err)
	}
	got, err := s.DisownAllocations(ctx, "ctl-1")
	want := []string{a.ID, b.ID}
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("DisownAllocations = %v, %v; want %v", got, err, want)
	}
	owner(a.ID, "", time.Time{}, store.AllocDisconnected)
	owner(b.ID, "", time.Time{}, store.AllocDisconnected)
	owner(c.ID, "ctl-2", reclaimedAt, store.AllocConnected)
	if got, err := s.DisownAllocations(ctx, "ctl-1"); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("second DisownAllocations = %#v, %v; want none", got, err)
	}
	// The empty controller owns nothing, and claims nothing.
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocConnected, "", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := s.DisownAllocations(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("DisownAllocations(\"\") = %v, %v; want none", got, err)
	}
	if ok, err := s.ReleaseAllocation(ctx, a.ID, ""); err != nil || ok {
		t.Fatalf("ReleaseAllocation(\"\") = %v, %v; want false", ok, err)
	}
	owner(a.ID, "", time.Time{}, store.AllocConnected)
	wantCode(t, "claim by no controller", s.ClaimAllocation(ctx, a.ID, "", "", ""), protocol.CodeInvalidArgument)

	// A final state refuses claims, and drops the owner it had.
	if err := s.UpdateAllocation(ctx, c.ID, store.AllocFailed, "", ""); err != nil {
		t.Fatal(err)
	}
	owner(c.ID, "", time.Time{}, store.AllocFailed)
	wantCode(t, "claim of a failed allocation", s.ClaimAllocation(ctx, c.ID, "ctl-2", "", ""), protocol.CodeConflict)
	if err := s.UpdateAllocation(ctx, c.ID, store.AllocDestroyed, "", ""); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "claim of a destroyed allocation", s.ClaimAllocation(ctx, c.ID, "ctl-2", "", ""), protocol.CodeConflict)
	owner(c.ID, "", time.Time{}, store.AllocDestroyed)
	wantCode(t, "claim of an unknown allocation", s.ClaimAllocation(ctx, "al_missing", "ctl-2", "", ""), protocol.CodeNotFound)
}

// Where an allocation was placed and its deadline are kept as given, whichever way it was
// created; OverdueAllocations finds the starting ones past their deadline.
func testAllocationPlacement(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := Fixture("placed", base, "bootstrap-placed")
	a.PlacedOn, a.ReadyBy = "ctl-1", base.Add(time.Minute).In(time.FixedZone("west", -5*3600))
	if err := s.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatal(err)
	}
	next := store.Allocation{ID: a.ID + "_2", WorkspaceID: w.ID, Provider: "local", State: store.AllocStarting,
		BootstrapHash: "bootstrap-placed-2", PlacedOn: "ctl-2", ReadyBy: base.Add(2 * time.Minute), CreatedAt: base, UpdatedAt: base}
	if err := s.AddAllocation(ctx, next); err != nil {
		t.Fatal(err)
	}
	_, open := create(t, s, "no-deadline", base) // ReadyBy zero: never overdue
	for _, want := range []store.Allocation{a, next, open} {
		got, err := s.GetAllocation(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.PlacedOn != want.PlacedOn || !got.ReadyBy.Equal(want.ReadyBy) || (!got.ReadyBy.IsZero() && got.ReadyBy.Location() != time.UTC) {
			t.Fatalf("allocation %s placed on %q, ready by %v; want %q, %v", want.ID, got.PlacedOn, got.ReadyBy, want.PlacedOn, want.ReadyBy)
		}
	}
	overdue := func(now time.Time, want ...string) {
		t.Helper()
		got, err := s.OverdueAllocations(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(got))
		for i, a := range got {
			ids[i] = a.ID
		}
		if got == nil || !slices.Equal(ids, want) {
			t.Fatalf("OverdueAllocations(%v) = %#v; want %v", now, ids, want)
		}
	}
	overdue(base)
	overdue(a.ReadyBy)                             // at the deadline is not past it
	overdue(a.ReadyBy.Add(time.Microsecond), a.ID) // just past it is
	overdue(base.Add(time.Hour), a.ID, next.ID)    // most overdue first
	// An allocation no longer starting is not overdue.
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocConnected, "", ""); err != nil {
		t.Fatal(err)
	}
	overdue(base.Add(time.Hour), next.ID)
}
