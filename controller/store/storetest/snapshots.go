package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

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

	// An incremental receipt keeps its manifest object and the layers it reads alive, the
	// reclaimed receipt's own object included.
	inc := api.Snapshot{ID: "snap-inc", WorkspaceID: w.ID, Epoch: 1, ObjectKey: "snapshots/snap-inc", Bytes: 1,
		SHA256: strings.Repeat("cd", 32), CreatedAt: base.Add(2 * time.Second),
		Layers: []string{old.ObjectKey, cur.ObjectKey}, ManifestKey: "snapshots/snap-inc.manifest"}
	if err := s.CreateSnapshot(ctx, inc); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSnapshot(ctx, inc.ID); err != nil || len(got.Layers) != 2 || got.Layers[0] != old.ObjectKey || got.ManifestKey != inc.ManifestKey {
		t.Fatalf("incremental receipt read back as %+v, %v", got, err)
	}
	keys, err = s.SnapshotObjectKeys(ctx)
	for _, k := range []string{old.ObjectKey, cur.ObjectKey, inc.ObjectKey, inc.ManifestKey} {
		if err != nil || !keys[k] {
			t.Fatalf("SnapshotObjectKeys = %v, %v; want %s kept", keys, err, k)
		}
	}
}

func testRemoveSnapshot(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "pruned", base)
	other, _ := create(t, s, "other", base)
	mk := func(ws api.Workspace, id string, at time.Time, layers ...string) api.Snapshot {
		snap := api.Snapshot{ID: id, WorkspaceID: ws.ID, Epoch: 1, ObjectKey: "snapshots/" + id, Bytes: 10,
			SHA256: strings.Repeat("ab", 32), CreatedAt: at, Layers: layers}
		if err := s.CreateSnapshot(ctx, snap); err != nil {
			t.Fatalf("CreateSnapshot(%s): %v", id, err)
		}
		return snap
	}
	a, b := mk(w, "snap-a", base), mk(w, "snap-b", base.Add(time.Second))
	// Another workspace's receipt reuses a's object as a layer.
	o := mk(other, "snap-o", base, a.ObjectKey)

	wantCode(t, "removing the newest receipt of a live workspace", func() error { _, err := s.RemoveSnapshot(ctx, b.ID); return err }(), protocol.CodeConflict)
	if list, err := s.ListSnapshots(ctx, w.ID); err != nil || len(list) != 2 {
		t.Fatalf("a refused removal changed the receipts: %+v, %v", list, err)
	}
	got, err := s.RemoveSnapshot(ctx, a.ID)
	if err != nil || got.ID != a.ID || got.ObjectKey != a.ObjectKey {
		t.Fatalf("RemoveSnapshot(%s) = %+v, %v", a.ID, got, err)
	}
	wantCode(t, "GetSnapshot of a removed receipt", func() error { _, err := s.GetSnapshot(ctx, a.ID); return err }(), protocol.CodeNotFound)
	wantCode(t, "second removal", func() error { _, err := s.RemoveSnapshot(ctx, a.ID); return err }(), protocol.CodeNotFound)
	if list, err := s.ListSnapshots(ctx, w.ID); err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Fatalf("ListSnapshots after removal: %+v, %v", list, err)
	}
	// a's object stays needed while o names it as a layer; each user is listed once.
	users, err := s.SnapshotObjectUsers(ctx)
	if err != nil || len(users[a.ObjectKey]) != 1 || users[a.ObjectKey][0] != other.ID ||
		len(users[b.ObjectKey]) != 1 || users[b.ObjectKey][0] != w.ID {
		t.Fatalf("SnapshotObjectUsers = %v, %v", users, err)
	}
	if keys, err := s.SnapshotObjectKeys(ctx); err != nil || !keys[a.ObjectKey] || !keys[o.ObjectKey] || !keys[b.ObjectKey] {
		t.Fatalf("SnapshotObjectKeys = %v, %v", keys, err)
	}
	// Once the workspace is deleted, its newest receipt may go too.
	if err := s.TransitionWorkspace(ctx, w.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveSnapshot(ctx, b.ID); err != nil {
		t.Fatalf("removing the last receipt of a deleted workspace: %v", err)
	}
	if keys, err := s.SnapshotObjectKeys(ctx); err != nil || keys[b.ObjectKey] || !keys[a.ObjectKey] {
		t.Fatalf("SnapshotObjectKeys after purge = %v, %v", keys, err)
	}
}

// testRemoveSnapshotRace removes every receipt of a workspace at once, many times: all but the
// newest go, the newest stays.
func testRemoveSnapshotRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i := range 10 {
		w, _ := create(t, s, fmt.Sprintf("race-%d", i), base)
		ids := []string{fmt.Sprintf("snap-r%d-1", i), fmt.Sprintf("snap-r%d-2", i), fmt.Sprintf("snap-r%d-3", i)}
		for j, id := range ids {
			if err := s.CreateSnapshot(ctx, api.Snapshot{ID: id, WorkspaceID: w.ID, Epoch: 1, ObjectKey: "snapshots/" + id,
				SHA256: strings.Repeat("ab", 32), CreatedAt: base.Add(time.Duration(j) * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan error, len(ids))
		for _, id := range ids {
			go func() { _, err := s.RemoveSnapshot(ctx, id); errs <- err }()
		}
		for range ids {
			if err := <-errs; err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
				t.Fatalf("concurrent removal: %v", err)
			}
		}
		if list, err := s.ListSnapshots(ctx, w.ID); err != nil || len(list) != 1 || list[0].ID != ids[2] {
			t.Fatalf("after concurrent removals: %+v, %v; want only %s", list, err, ids[2])
		}
	}
}

// A capture's receipt is written only while its parent is still the workspace's newest receipt,
// after the parent whatever the capturing controller's clock says, and never for a deleted
// workspace.
func testAppendSnapshot(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "appended", base)
	mk := func(id, parent string, at time.Time) api.Snapshot {
		return api.Snapshot{ID: id, WorkspaceID: w.ID, Epoch: 1, Parent: parent, ObjectKey: "snapshots/" + id, Bytes: 10,
			SHA256: strings.Repeat("ab", 32), CreatedAt: at}
	}
	// A capture that started from a receipt while the workspace had none is refused.
	_, err := s.AppendSnapshot(ctx, mk("snap-early", "snap-none", base))
	wantCode(t, "a receipt naming a parent the workspace does not have", err, protocol.CodeConflict)
	first, err := s.AppendSnapshot(ctx, mk("snap-1", "", base.Add(time.Minute)))
	if err != nil || !first.CreatedAt.Equal(base.Add(time.Minute)) {
		t.Fatalf("first receipt: %+v, %v", first, err)
	}
	// Written by a controller whose clock is behind: placed after its parent.
	second, err := s.AppendSnapshot(ctx, mk("snap-2", first.ID, base))
	if err != nil || !second.CreatedAt.After(first.CreatedAt) {
		t.Fatalf("second receipt from a late clock: %+v, %v; want it after %v", second, err, first.CreatedAt)
	}
	// Two captures that both started from snap-1: the one that comes second is refused.
	_, err = s.AppendSnapshot(ctx, mk("snap-stale", first.ID, base.Add(time.Hour)))
	wantCode(t, "a receipt whose parent is no longer the newest", err, protocol.CodeConflict)
	list, err := s.ListSnapshots(ctx, w.ID)
	if err != nil || len(list) != 2 || list[0].ID != first.ID || list[1].ID != second.ID || !list[1].CreatedAt.Equal(second.CreatedAt) {
		t.Fatalf("receipts: %+v, %v; want snap-1 then snap-2 as returned", list, err)
	}
	if err := s.TransitionWorkspace(ctx, w.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	_, err = s.AppendSnapshot(ctx, mk("snap-late", second.ID, base.Add(time.Hour)))
	wantCode(t, "a receipt of a deleted workspace", err, protocol.CodeConflict)
	if list, _ := s.ListSnapshots(ctx, w.ID); len(list) != 2 {
		t.Fatalf("receipts after refusals: %+v", list)
	}
}
