package storetest

import (
	"context"
	"testing"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// A child's parent and receipt round-trip (by id, by name and in lists) and are set once.
func testWorkspaceParent(t *testing.T, s store.Store) {
	ctx := context.Background()
	parent, _ := create(t, s, "lineage-parent", base)
	child, _ := create(t, s, "lineage-child", base)
	if got, _ := s.GetWorkspace(ctx, child.ID); got.Parent != nil {
		t.Fatalf("a new workspace has a parent: %+v", got.Parent)
	}
	wantCode(t, "a parent without a receipt", s.SetWorkspaceParent(ctx, child.ID, parent.ID, ""), protocol.CodeInvalidArgument)
	if err := s.SetWorkspaceParent(ctx, child.ID, parent.ID, "snap-1"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{child.ID, "lineage-child"} {
		got, err := s.GetWorkspace(ctx, key)
		if err != nil || got.Parent == nil || got.Parent.Workspace != parent.ID || got.Parent.Snapshot != "snap-1" {
			t.Fatalf("GetWorkspace(%s) after set: %+v, %v", key, got.Parent, err)
		}
	}
	list, err := s.ListWorkspaces(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list {
		switch w.ID {
		case child.ID:
			if w.Parent == nil || w.Parent.Snapshot != "snap-1" {
				t.Fatalf("listed child: %+v", w.Parent)
			}
		case parent.ID:
			if w.Parent != nil {
				t.Fatalf("the parent has a parent in the list: %+v", w.Parent)
			}
		}
	}
	wantCode(t, "second parent", s.SetWorkspaceParent(ctx, child.ID, "ws-other", "snap-2"), protocol.CodeConflict)
	if got, _ := s.GetWorkspace(ctx, child.ID); got.Parent == nil || got.Parent.Workspace != parent.ID || got.Parent.Snapshot != "snap-1" {
		t.Fatalf("a refused second parent changed the record: %+v", got.Parent)
	}
	wantCode(t, "parent of a missing workspace", s.SetWorkspaceParent(ctx, "ws-missing", parent.ID, "s"), protocol.CodeNotFound)
}
