package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

func sizes(snaps ...api.Snapshot) (n int64) {
	for _, s := range snaps {
		n += s.Bytes
	}
	return n
}

func (tc *testController) usageOf(t *testing.T, wsID string) (own int64, u api.StorageUsage) {
	t.Helper()
	u, err := tc.s.StorageUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range u.Workspaces {
		if w.WorkspaceID == wsID {
			own = w.Bytes
		}
	}
	return own, u
}

// Prune to N: the removed receipts are gone, their objects stay until gc, which frees exactly
// their bytes (du shows it); every kept receipt still verifies.
func TestPruneThenGCFreesTheirBytes(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.storedWorkspace(t, "pruned", clock.Now(), 4, nil)
	own, _ := tc.usageOf(t, ws.ID)
	if own != sizes(snaps...) {
		t.Fatalf("du before: %d bytes of its own, want %d", own, sizes(snaps...))
	}

	if _, err := tc.s.prune(ctx, ws.ID, api.RetentionPolicy{KeepLast: -1}, false); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("a negative policy: %v", err)
	}
	dry, err := tc.s.prune(ctx, ws.ID, api.RetentionPolicy{KeepLast: 2}, true)
	if err != nil || len(dry.Removed) != 2 || len(dry.Kept) != 2 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if list, _ := tc.s.store.ListSnapshots(ctx, ws.ID); len(list) != 4 {
		t.Fatalf("a dry run removed receipts: %d left", len(list))
	}
	res, err := tc.s.prune(ctx, ws.ID, api.RetentionPolicy{KeepLast: 2}, false)
	if err != nil || len(res.Removed) != 2 || res.Removed[0].ID != snaps[1].ID || res.Removed[1].ID != snaps[0].ID ||
		res.Kept[0].ID != snaps[3].ID || !slices.Equal(res.Kept[0].Rules, []string{"newest", "last"}) {
		t.Fatalf("prune: %+v %v", res, err)
	}
	for _, gone := range snaps[:2] {
		if _, err := tc.s.store.GetSnapshot(ctx, gone.ID); protocol.CodeOf(err) != protocol.CodeNotFound {
			t.Fatalf("pruned receipt %s: %v", gone.ID, err)
		}
		if !tc.objectExists(gone.ObjectKey) {
			t.Fatal("prune deleted an object: that is gc's")
		}
	}
	own, u := tc.usageOf(t, ws.ID)
	if own != sizes(snaps[2:]...) || u.Unreferenced.Bytes != sizes(snaps[:2]...) || u.Unreferenced.Objects != 2 {
		t.Fatalf("du after prune: own %d, %+v", own, u)
	}

	// Within the grace nothing goes; with none, the two objects.
	if res, err := tc.s.GC(ctx, time.Hour, false); err != nil || res.Objects.Objects != 0 || !tc.objectExists(snaps[0].ObjectKey) {
		t.Fatalf("gc within the grace: %+v %v", res, err)
	}
	gc, err := tc.s.GC(ctx, 0, false)
	if err != nil || gc.Objects.Objects != 2 || gc.Objects.Bytes != sizes(snaps[:2]...) || gc.Bytes != gc.Objects.Bytes {
		t.Fatalf("gc: %+v %v", gc, err)
	}
	for _, gone := range snaps[:2] {
		if tc.objectExists(gone.ObjectKey) {
			t.Fatalf("gc left %s", gone.ObjectKey)
		}
	}
	for _, kept := range snaps[2:] {
		if _, err := tc.s.verifySnapshot(ctx, kept); err != nil {
			t.Fatalf("kept receipt %s: %v", kept.ID, err)
		}
	}
	if own, u := tc.usageOf(t, ws.ID); own != sizes(snaps[2:]...) || u.Unreferenced != (api.StorageFigure{}) || u.Total.Bytes != own {
		t.Fatalf("du after gc: own %d, %+v", own, u)
	}
	// The newest receipt of a live workspace is never removed.
	if _, err := tc.s.store.RemoveSnapshot(ctx, snaps[3].ID); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("removing the newest: %v", err)
	}
}

// The controller's default policy is applied by gc to every workspace.
func TestGCAppliesDefaultPolicy(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock), func(c *Config) { c.Retention = api.RetentionPolicy{KeepLast: 1} })
	ctx := context.Background()
	a, asnaps := tc.storedWorkspace(t, "a", clock.Now(), 3, nil)
	b, bsnaps := tc.storedWorkspace(t, "b", clock.Now(), 2, nil)
	res, err := tc.s.GC(ctx, 0, false)
	if err != nil || len(res.Pruned) != 2 || res.Objects.Objects != 3 || res.Objects.Bytes != sizes(asnaps[:2]...)+sizes(bsnaps[:1]...) {
		t.Fatalf("gc: %+v %v", res, err)
	}
	for ws, want := range map[string]string{a.ID: asnaps[2].ID, b.ID: bsnaps[1].ID} {
		if list, _ := tc.s.store.ListSnapshots(ctx, ws); len(list) != 1 || list[0].ID != want {
			t.Fatalf("%s keeps %+v, want only %s", ws, list, want)
		}
	}
}

// An object another live receipt names in its layers survives the removal (or reclaim) of its
// own receipt, through the sweep and the project reclaim alike, until no receipt names it.
func TestGCKeepsLayersOfLiveReceipts(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	_, asnaps := tc.storedWorkspace(t, "a", clock.Now(), 2, nil)
	// Three receipts: reclaiming frees the middle one's object; the oldest's is another
	// workspace's layer (a reclaim that would free nothing is not started at all).
	proj, psnaps := tc.closedWorkspace(t, "proj", clock.Now(), 3)
	// An incremental receipt of another workspace reusing both older objects.
	b, bsnaps := tc.storedWorkspace(t, "b", clock.Now(), 1, nil)
	inc := tc.putReceipt(t, bsnaps[0], time.Second, asnaps[0].ObjectKey, psnaps[0].ObjectKey)
	if _, err := tc.s.store.RemoveSnapshot(ctx, asnaps[0].ID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(48 * time.Hour)
	res, err := tc.s.GC(ctx, 0, false)
	if cand := findCandidate(res, proj.ID); err != nil || cand == nil || !cand.Reclaimed {
		t.Fatalf("gc: %+v %v", res, err)
	}
	if !tc.objectExists(asnaps[0].ObjectKey) || !tc.objectExists(psnaps[0].ObjectKey) {
		t.Fatal("gc deleted an object a live receipt names in its layers")
	}
	if tc.objectExists(psnaps[1].ObjectKey) {
		t.Fatal("the reclaim kept the superseded object no receipt reads")
	}
	// Both layers are b's alone now: du counts them as its own.
	if own, _ := tc.usageOf(t, b.ID); own != sizes(bsnaps[0], inc, asnaps[0], psnaps[0]) {
		t.Fatalf("du: b holds %d, want %d", own, sizes(bsnaps[0], inc, asnaps[0], psnaps[0]))
	}
	// Once no receipt names them, both go.
	later := tc.putReceipt(t, inc, time.Second)
	if _, err := tc.s.store.RemoveSnapshot(ctx, inc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.GC(ctx, 0, false); err != nil {
		t.Fatal(err)
	}
	if tc.objectExists(asnaps[0].ObjectKey) || tc.objectExists(psnaps[0].ObjectKey) || tc.objectExists(inc.ObjectKey) || !tc.objectExists(later.ObjectKey) {
		t.Fatal("gc did not free exactly the objects no receipt names any more")
	}
}

// putReceipt records a receipt of like's workspace after like, with an object of its own (1000
// bytes) and the given layers, as an incremental capture would.
func (tc *testController) putReceipt(t *testing.T, like api.Snapshot, after time.Duration, layers ...string) api.Snapshot {
	t.Helper()
	ctx := context.Background()
	snap := like
	snap.ID, snap.CreatedAt, snap.Layers = newID("snap_"), like.CreatedAt.Add(after), layers
	snap.ObjectKey = snapshotKey(like.WorkspaceID, snap.ID, false)
	info, err := tc.s.blobs.Put(ctx, snap.ObjectKey, io.LimitReader(zeros{}, 1000), "")
	if err != nil {
		t.Fatal(err)
	}
	snap.Bytes = info.Size
	if err := tc.s.store.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	return snap
}

// A read pins what it reads: gc with no grace leaves the object of a receipt removed under a
// running restore, export or saved read, and frees it once the read is done. A read that
// starts after the removal is refused. A capture's object is pinned until its receipt exists.
func TestGCKeepsWhatIsBeingReadOrWritten(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.storedWorkspace(t, "read", clock.Now(), 2, nil)
	archive, closeArchive, err := tc.s.archives.Open(ctx, snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.prune(ctx, ws.ID, api.RetentionPolicy{KeepLast: 1}, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.s.archives.Open(ctx, snaps[0]); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("a read of a removed receipt: %v", err)
	}
	if _, u := tc.usageOf(t, ws.ID); u.InFlight.Objects != 1 || u.Unreferenced.Objects != 0 {
		t.Fatalf("du while read: %+v", u)
	}
	if res, err := tc.s.GC(ctx, 0, false); err != nil || res.Objects.Objects != 0 || !tc.objectExists(snaps[0].ObjectKey) {
		t.Fatalf("gc under a read: %+v %v", res, err)
	}
	// The read goes on to its verified end.
	if _, err := io.Copy(io.Discard, archive); err != nil {
		t.Fatalf("the read after gc: %v", err)
	}
	closeArchive()
	if res, err := tc.s.GC(ctx, 0, false); err != nil || res.Objects.Objects != 1 || tc.objectExists(snaps[0].ObjectKey) {
		t.Fatalf("gc after the read: %+v %v", res, err)
	}

	// A capture in flight: its object stored, its receipt not yet written.
	key := snapshotKey(ws.ID, newID("snap_"), false)
	unpin, err := tc.s.uploads.pin(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.s.blobs.Put(ctx, key, io.LimitReader(zeros{}, 1000), ""); err != nil {
		t.Fatal(err)
	}
	if res, err := tc.s.GC(ctx, 0, false); err != nil || res.Objects.Objects != 0 || !tc.objectExists(key) {
		t.Fatalf("gc under a capture: %+v %v", res, err)
	}
	unpin()
	if res, err := tc.s.GC(ctx, 0, false); err != nil || res.Objects.Objects != 1 || tc.objectExists(key) {
		t.Fatalf("gc after a capture that wrote no receipt: %+v %v", res, err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A gc (and a prune, a purge) killed at any step never deletes a needed object, and the next
// run finishes it.
func TestGCInterruptedAtEachStep(t *testing.T) {
	for _, step := range []string{"receipt removed", "objects listed", "object deleted"} {
		t.Run(step, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			tc := newTestController(t, withClock(clock), func(c *Config) { c.Retention = api.RetentionPolicy{KeepLast: 1} })
			ctx := context.Background()
			ws, snaps := tc.storedWorkspace(t, "crashy", clock.Now(), 3, nil)
			crash := errors.New("crash")
			hit := 0
			tc.s.gcStep = func(s string) error {
				if s == step {
					hit++
					return crash
				}
				return nil
			}
			if _, err := tc.s.GC(ctx, 0, false); !errors.Is(err, crash) || hit != 1 {
				t.Fatalf("interrupted gc: %v (step hit %d times)", err, hit)
			}
			if _, err := tc.s.verifySnapshot(ctx, snaps[2]); err != nil {
				t.Fatalf("the kept receipt after the interruption: %v", err)
			}
			tc.s.gcStep = nil
			res, err := tc.s.GC(ctx, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			if list, _ := tc.s.store.ListSnapshots(ctx, ws.ID); len(list) != 1 || list[0].ID != snaps[2].ID {
				t.Fatalf("after the next run: receipts %+v (%+v)", list, res)
			}
			for _, gone := range snaps[:2] {
				if tc.objectExists(gone.ObjectKey) {
					t.Fatalf("after the next run: %s left", gone.ObjectKey)
				}
			}
			if _, err := tc.s.verifySnapshot(ctx, snaps[2]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// rm --purge removes the receipts of a workspace, the newest included; stopped half way, it is
// finished on the deleted workspace; gc then gives the space back.
func TestPurge(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.storedWorkspace(t, "purged", clock.Now(), 3, nil)
	// Deleting a workspace releases its sandbox through a provider plugin, which this harness
	// has none of (the integration test purges a live one): deleted as rm would leave it.
	if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.Delete, "", "test"); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("crash")
	tc.s.gcStep = func(s string) error {
		if s == "receipt removed" {
			return crash
		}
		return nil
	}
	if _, err := tc.s.purgeWorkspace(ctx, ws.ID); !errors.Is(err, crash) {
		t.Fatalf("interrupted purge: %v", err)
	}
	tc.s.gcStep = nil
	if got, _ := tc.s.store.GetWorkspace(ctx, ws.ID); got.State != api.StateDeleted {
		t.Fatalf("after the interrupted purge: %s", got.State)
	}
	res, err := tc.s.purgeWorkspace(ctx, ws.ID)
	if err != nil || len(res.Removed) != 2 || res.Workspace.State != api.StateDeleted {
		t.Fatalf("purge of the deleted workspace: %+v %v", res, err)
	}
	if list, _ := tc.s.store.ListSnapshots(ctx, ws.ID); len(list) != 0 {
		t.Fatalf("receipts left: %+v", list)
	}
	_, u := tc.usageOf(t, ws.ID)
	if u.Unreferenced.Bytes != sizes(snaps...) {
		t.Fatalf("du after purge: %+v", u)
	}
	if gc, err := tc.s.GC(ctx, 0, false); err != nil || gc.Objects.Bytes != sizes(snaps...) {
		t.Fatalf("gc after purge: %+v %v", gc, err)
	}
	if _, u := tc.usageOf(t, ws.ID); u.Total != (api.StorageFigure{}) {
		t.Fatalf("du after gc: %+v", u)
	}
}

// A workspace-limited token prunes and removes its own workspaces' receipts; storage du and gc
// span every workspace and are refused to it (another workspace's receipts are not_found to it:
// TestLimitedTokenRoutes).
func TestLimitedTokenRetention(t *testing.T) {
	tc := newTestController(t)
	f := newScopeFixture(t, tc)
	ctx := context.Background()
	cl := tc.apiClient(t, f.token)
	now := time.Now().UTC()
	var ids []string
	for i := range 3 {
		// Real objects: a prune verifies the newest receipt before removing anything.
		ids = append(ids, tc.storedReceipt(t, f.mine.ID, fmt.Sprint("version ", i), now.Add(time.Duration(i)*time.Second)).ID)
	}
	if _, err := cl.PruneSnapshots(ctx, f.mine.ID, api.PruneRequest{}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("prune with no policy anywhere: %v", err)
	}
	res, err := cl.PruneSnapshots(ctx, f.mine.ID, api.PruneRequest{Policy: api.RetentionPolicy{KeepLast: 2}})
	if err != nil || len(res.Removed) != 1 || res.Removed[0].ID != ids[0] {
		t.Fatalf("own prune: %+v %v", res, err)
	}
	if _, err := cl.RemoveSnapshot(ctx, ids[2]); protocol.CodeOf(err) != protocol.CodeConflict || !strings.Contains(err.Error(), "reopen restores from it") {
		t.Fatalf("removing the newest: %v", err)
	}
	if snap, err := cl.RemoveSnapshot(ctx, ids[1]); err != nil || snap.ID != ids[1] {
		t.Fatalf("own rm: %+v %v", snap, err)
	}
	if _, err := cl.StorageUsage(ctx); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("du with a limited token: %v", err)
	}
	if _, err := cl.GC(ctx, api.GCRequest{}); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("gc with a limited token: %v", err)
	}
}

// Two reads pinning one object: the end of one leaves the other's heartbeat in the store, where
// other controllers' sweeps look for it.
func TestPinOutlivesAnotherPinsRelease(t *testing.T) {
	tc := newTestController(t)
	ctx := context.Background()
	hb := pinPrefix + "snapshots/x " + tc.s.id
	first, err := tc.s.uploads.pin("snapshots/x")
	if err != nil {
		t.Fatal(err)
	}
	second, err := tc.s.uploads.pin("snapshots/x")
	if err != nil {
		t.Fatal(err)
	}
	first()
	if touched, err := tc.s.store.LiveUploads(ctx, time.Time{}); err != nil || !touched[hb] {
		t.Fatalf("after one of two pins ended: %v %v", touched, err)
	}
	second()
	if touched, err := tc.s.store.LiveUploads(ctx, time.Time{}); err != nil || touched[hb] {
		t.Fatalf("after both pins ended: %v %v", touched, err)
	}
}
