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
