package storetest

import (
	"context"
	"testing"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// A workspace's source and base receipt round-trip and are set once.
func testWorkspaceSource(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "src-once", base)
	if got, _ := s.GetWorkspace(ctx, w.ID); got.SourceDir != "" || got.SourceBase != "" {
		t.Fatalf("a new workspace has a source: %+v", got)
	}
	if err := s.SetWorkspaceSource(ctx, w.ID, "/home/me/repo", "snap-base"); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, w.ID)
	if err != nil || got.SourceDir != "/home/me/repo" || got.SourceBase != "snap-base" {
		t.Fatalf("source after set: %+v, %v", got, err)
	}
	wantCode(t, "second source", s.SetWorkspaceSource(ctx, w.ID, "/elsewhere", "snap-2"), protocol.CodeConflict)
	if got, _ := s.GetWorkspace(ctx, w.ID); got.SourceBase != "snap-base" || got.SourceDir != "/home/me/repo" {
		t.Fatalf("a refused second source changed the record: %+v", got)
	}
	wantCode(t, "source of a missing workspace", s.SetWorkspaceSource(ctx, "ws-missing", "/x", "s"), protocol.CodeNotFound)

	if err := s.AdvanceSourceBase(ctx, w.ID, "snap-base", "snap-pulled"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "advance from a base that moved", s.AdvanceSourceBase(ctx, w.ID, "snap-base", "snap-other"), protocol.CodeConflict)
	if got, _ := s.GetWorkspace(ctx, w.ID); got.SourceBase != "snap-pulled" || got.SourceDir != "/home/me/repo" {
		t.Fatalf("after advancing: %+v", got)
	}
	wantCode(t, "advance of a missing workspace", s.AdvanceSourceBase(ctx, "ws-missing", "a", "b"), protocol.CodeNotFound)
}
