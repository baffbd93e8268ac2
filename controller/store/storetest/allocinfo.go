package storetest

import (
	"context"
	"maps"
	"testing"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

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
