package storetest

import (
	"context"
	"maps"
	"testing"

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
