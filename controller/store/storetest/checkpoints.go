package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// A workspace's checkpoint interval (unset, off, set) and check time round-trip without touching
// updated_at; a receipt's checkpoint mark round-trips.
func testCheckpoints(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, a := Fixture("cp-own", base, "bootstrap-cp-own")
	every := protocol.Duration(5 * time.Minute)
	w.CheckpointEvery = &every
	if err := s.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, w.ID)
	if err != nil || got.CheckpointEvery == nil || *got.CheckpointEvery != every || got.LastCheckpointAt != nil {
		t.Fatalf("created with an interval: %+v, %v", got, err)
	}
	plain, _ := create(t, s, "cp-default", base)
	if got, _ := s.GetWorkspace(ctx, plain.ID); got.CheckpointEvery != nil {
		t.Fatalf("a workspace without an interval reads %v", *got.CheckpointEvery)
	}
	off := time.Duration(0)
	if err := s.SetCheckpointEvery(ctx, plain.ID, &off); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetWorkspace(ctx, plain.ID); got.CheckpointEvery == nil || *got.CheckpointEvery != 0 {
		t.Fatalf("off reads %v", got.CheckpointEvery)
	}
	if err := s.SetCheckpointEvery(ctx, w.ID, nil); err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Hour)
	if err := s.SetCheckpointChecked(ctx, w.ID, at); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetWorkspace(ctx, w.ID)
	if err != nil || got.CheckpointEvery != nil || got.LastCheckpointAt == nil || !got.LastCheckpointAt.Equal(at) || !got.UpdatedAt.Equal(w.UpdatedAt) {
		t.Fatalf("after default and a check: %+v, %v", got, err)
	}
	wantCode(t, "interval of a missing workspace", s.SetCheckpointEvery(ctx, "ws-missing", nil), protocol.CodeNotFound)
	wantCode(t, "check of a missing workspace", s.SetCheckpointChecked(ctx, "ws-missing", at), protocol.CodeNotFound)

	snap := api.Snapshot{ID: "snap-cp", WorkspaceID: w.ID, Epoch: 1, ObjectKey: "snapshots/snap-cp", Bytes: 1,
		SHA256: strings.Repeat("ef", 32), CreatedAt: base, Checkpoint: true}
	if err := s.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSnapshot(ctx, snap.ID); err != nil || !got.Checkpoint {
		t.Fatalf("checkpoint receipt: %+v, %v", got, err)
	}
}

// SetWorkspaceGit gives a workspace its own branch, refusing one a live workspace of the project
// has (and changing nothing then).
func testSetWorkspaceGit(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateProject(ctx, api.Project{ID: "prj_fork", Name: "forkp", Source: "/src/f", BaseRef: "main", Mode: api.ModeIsolated}); err != nil {
		t.Fatal(err)
	}
	taken := createGit(t, s, "fork-src", "prj_fork", "tether/fork-src", api.StateReady, base)
	w, _ := create(t, s, "fork-1", base)
	g := *taken.Git
	g.Branch = taken.Git.Branch
	wantCode(t, "a taken branch", s.SetWorkspaceGit(ctx, w.ID, &g), protocol.CodeConflict)
	if got, _ := s.GetWorkspace(ctx, w.ID); got.Git != nil {
		t.Fatalf("a refused SetWorkspaceGit changed the record: %+v", got.Git)
	}
	g.Branch = "tether/fork-1"
	if err := s.SetWorkspaceGit(ctx, w.ID, &g); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, w.ID)
	if err != nil || got.Git == nil || got.Git.Branch != "tether/fork-1" || got.Git.ProjectID != "prj_fork" {
		t.Fatalf("after SetWorkspaceGit: %+v, %v", got.Git, err)
	}
	if found, ok, err := s.OpenWorkspaceFor(ctx, "prj_fork", "tether/fork-1"); err != nil || !ok || found.ID != w.ID {
		t.Fatalf("OpenWorkspaceFor the fork's branch: %v %v %v", found.ID, ok, err)
	}
}
