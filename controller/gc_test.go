package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// closedWorkspace records a workspace closed at at with n receipts, each a real archive of a
// small tree stored in the blob store.
func (tc *testController) closedWorkspace(t *testing.T, name string, at time.Time, n int) (api.Workspace, []api.Snapshot) {
	t.Helper()
	return tc.storedWorkspace(t, name, at, n, &api.WorkspaceGit{ProjectID: "prj_test", Mode: api.ModeIsolated,
		Strategy: api.StrategyClone, Branch: "tether/" + name, BaseRef: "main"})
}

// storedWorkspace is closedWorkspace of a project checkout (git set) or not (nil).
func (tc *testController) storedWorkspace(t *testing.T, name string, at time.Time, n int, git *api.WorkspaceGit) (api.Workspace, []api.Snapshot) {
	t.Helper()
	ctx := context.Background()
	w := api.Workspace{ID: newID("ws_"), Name: name, Provider: "local", State: api.StateClosed,
		AllocationID: newID("al_"), CreatedAt: at.Add(-time.Hour), UpdatedAt: at, Git: git}
	a := store.Allocation{ID: w.AllocationID, WorkspaceID: w.ID, Provider: "local", State: store.AllocDestroyed,
		BootstrapHash: hashToken(newToken(prefixBootstrap)), CreatedAt: at, UpdatedAt: at}
	if err := tc.s.store.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatal(err)
	}
	var snaps []api.Snapshot
	for i := range n {
		snaps = append(snaps, tc.storedReceipt(t, w.ID, strings.Repeat(name, 1000+i), at.Add(time.Duration(i-n)*time.Minute)))
	}
	return w, snaps
}

// storedReceipt stores a real archive of a tree of one file holding content, and its receipt for
// workspace wsID at the given time.
func (tc *testController) storedReceipt(t *testing.T, wsID, content string, at time.Time) api.Snapshot {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "work.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := fsguard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	m, err := snapshot.Capture(ctx, root, &buf, snapshot.CaptureOptions{})
	root.Close()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	snap := api.Snapshot{ID: newID("snap_"), WorkspaceID: wsID, ObjectKey: "snapshots/" + wsID + "/" + hex.EncodeToString(sum[:8]),
		Bytes: int64(buf.Len()), SHA256: hex.EncodeToString(sum[:]), Entries: m.Totals.Entries,
		Summary: protocol.SnapshotSummary{Entries: m.Totals.Entries, Bytes: m.Totals.Bytes}, CreatedAt: at}
	if _, err := tc.s.blobs.Put(ctx, snap.ObjectKey, bytes.NewReader(buf.Bytes()), snap.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := tc.s.store.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	return snap
}

func (tc *testController) objectExists(key string) bool {
	_, err := tc.s.blobs.Stat(context.Background(), key)
	return err == nil
}

func findCandidate(res api.GCResult, id string) *api.GCCandidate {
	for i := range res.Candidates {
		if res.Candidates[i].WorkspaceID == id {
			return &res.Candidates[i]
		}
	}
	return nil
}

func TestGCGraceDryRunAndReclaim(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.closedWorkspace(t, "old", clock.Now(), 3)
	clock.Advance(time.Hour)

	res, err := tc.s.GC(ctx, 2*time.Hour, true)
	if err != nil || findCandidate(res, ws.ID) != nil {
		t.Fatalf("within the grace: %+v %v", res, err)
	}
	res, err = tc.s.GC(ctx, 30*time.Minute, true)
	cand := findCandidate(res, ws.ID)
	if err != nil || cand == nil || !cand.Reclaimable || cand.Reclaimed || cand.Bytes != snaps[0].Bytes+snaps[1].Bytes {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	for _, s := range snaps {
		if !tc.objectExists(s.ObjectKey) {
			t.Fatal("a dry run deleted an object")
		}
	}

	res, err = tc.s.GC(ctx, 30*time.Minute, false)
	if cand := findCandidate(res, ws.ID); err != nil || cand == nil || !cand.Reclaimed || res.Bytes != snaps[0].Bytes+snaps[1].Bytes {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if tc.objectExists(snaps[0].ObjectKey) || tc.objectExists(snaps[1].ObjectKey) || !tc.objectExists(snaps[2].ObjectKey) {
		t.Fatal("the sweep did not reclaim exactly the superseded receipts")
	}
	got, _ := tc.s.store.GetWorkspace(ctx, ws.ID)
	if got.State != api.StateClosed || got.ReclaimedAt == nil {
		t.Fatalf("workspace after the sweep: %+v", got)
	}
	if _, err := tc.s.verifySnapshot(ctx, snaps[2]); err != nil {
		t.Fatalf("the newest receipt no longer verifies: %v", err)
	}
}

func TestGCKeeps(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	leased, _ := tc.closedWorkspace(t, "leased", clock.Now(), 2)
	// Held across the sweep, on the clock the store and the sweep share.
	if _, err := tc.s.store.AcquireLease(ctx, leased.ID, "someone", 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	corrupt, csnaps := tc.closedWorkspace(t, "corrupt", clock.Now(), 2)
	if _, err := tc.s.blobs.Put(ctx, csnaps[1].ObjectKey, strings.NewReader("not the archive"), ""); err != nil {
		t.Fatal(err)
	}
	running, _ := tc.closedWorkspace(t, "running", clock.Now(), 2)
	if err := tc.s.store.CreateRun(ctx, api.Run{ID: newID("run_"), WorkspaceID: running.ID, AllocationID: running.AllocationID,
		Argv: []string{"sleep"}, State: api.RunRunning, StartedAt: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	none, _ := tc.closedWorkspace(t, "none", clock.Now(), 0)
	clock.Advance(48 * time.Hour)
	res, err := tc.s.GC(ctx, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range []api.Workspace{leased, corrupt, running, none} {
		cand := findCandidate(res, ws.ID)
		if cand == nil || cand.Reclaimable || cand.Reclaimed || cand.Why == "" {
			t.Fatalf("%s: %+v", ws.Name, cand)
		}
	}
	if res.Bytes != 0 || !tc.objectExists(csnaps[0].ObjectKey) {
		t.Fatalf("a kept workspace lost storage: %+v", res)
	}
}

// A sweep that stops half way (a crash) leaves the workspace reclaiming; a reopen finishes the
// reclaim before it restores anything, and so would the next sweep.
func TestGCInterruptedSweepIsFinishedByReopen(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.closedWorkspace(t, "crashy", clock.Now(), 2)
	other, osnaps := tc.closedWorkspace(t, "crashy-too", clock.Now().Add(time.Minute), 2) // listed after crashy
	clock.Advance(48 * time.Hour)
	crash := errors.New("crash")
	tc.s.gcStep = func(step string) error {
		if step == "receipts marked" {
			return crash
		}
		return nil
	}
	if _, err := tc.s.GC(ctx, time.Hour, false); !errors.Is(err, crash) {
		t.Fatalf("interrupted sweep: %v", err)
	}
	mid, _ := tc.s.store.GetWorkspace(ctx, ws.ID)
	if mid.State != api.StateReclaiming || !tc.objectExists(snaps[0].ObjectKey) {
		t.Fatalf("after the interruption: %+v", mid)
	}
	// The marked receipt is never served again, even before its object is gone.
	if _, _, err := tc.s.archives.Open(ctx, mustSnapshot(t, tc, snaps[0].ID)); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("a reclaimed receipt was opened: %v", err)
	}
	tc.s.gcStep = nil
	// No provider plugins here: the reopen fails after it finished the reclaim.
	_, _ = tc.s.ReopenWorkspace(ctx, ws.ID, api.ReopenRequest{})
	after, _ := tc.s.store.GetWorkspace(ctx, ws.ID)
	if after.State != api.StateClosed || after.ReclaimedAt == nil || tc.objectExists(snaps[0].ObjectKey) || !tc.objectExists(snaps[1].ObjectKey) {
		t.Fatalf("reopen did not finish the reclaim first: %+v", after)
	}
	// The other workspace the interrupted sweep never reached is reclaimed by the next sweep,
	// once the reopen's own change (stamped on the same clock) is past the grace too.
	clock.Advance(2 * time.Hour)
	res, err := tc.s.GC(ctx, time.Hour, false)
	if cand := findCandidate(res, other.ID); err != nil || cand == nil || !cand.Reclaimed || tc.objectExists(osnaps[0].ObjectKey) {
		t.Fatalf("the next sweep: %+v %v", res, err)
	}
	if cand := findCandidate(res, ws.ID); cand == nil || cand.Reclaimable {
		t.Fatalf("a reclaimed workspace was reclaimable again: %+v", cand)
	}
}

func mustSnapshot(t *testing.T, tc *testController, id string) api.Snapshot {
	t.Helper()
	snap, err := tc.s.store.GetSnapshot(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// The retention policy removes nothing behind a newest receipt that does not verify: the older
// receipts are then the only good copies of the work. gc goes on with the other workspaces, and
// an explicit prune is refused (found in review).
func TestRetentionKeepsReceiptsBehindADamagedNewest(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock), func(c *Config) { c.Retention = api.RetentionPolicy{KeepLast: 1} })
	ctx := context.Background()
	ws, snaps := tc.closedWorkspace(t, "damaged", clock.Now(), 2)
	if _, err := tc.s.blobs.Put(ctx, snaps[1].ObjectKey, strings.NewReader("not the archive"), ""); err != nil {
		t.Fatal(err)
	}
	other, kept := tc.storedWorkspace(t, "sound", clock.Now(), 2, nil)
	clock.Advance(48 * time.Hour)
	res, err := tc.s.GC(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if !tc.objectExists(snaps[0].ObjectKey) || len(receipts(t, tc, ws.ID)) != 2 {
		t.Fatalf("gc removed %s behind a newest receipt that does not verify (pruned: %+v)", snaps[0].ID, res.Pruned)
	}
	if list := receipts(t, tc, other.ID); len(list) != 1 || list[0].ID != kept[1].ID {
		t.Fatalf("the sound workspace was not pruned to its newest: %v", ids(list))
	}
	_, err = tc.s.prune(ctx, ws.ID, api.RetentionPolicy{KeepLast: 1}, false)
	if protocol.CodeOf(err) != protocol.CodeCorrupt || len(receipts(t, tc, ws.ID)) != 2 {
		t.Fatalf("prune behind a damaged newest: %v", err)
	}
}

// flakyGet fails every Get of key, as a blob store that cannot be reached would.
type flakyGet struct {
	blob.Store
	key string
}

func (f flakyGet) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if key == f.key {
		return nil, blob.Info{}, errors.New("connection reset by peer")
	}
	return f.Store.Get(ctx, key)
}

// One workspace's newest receipt cannot be read for a moment: gc leaves that workspace as it is
// and goes on with the others (found in review: the whole gc stopped).
func TestGCGoesOnPastAnUnreadableNewestReceipt(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock), func(c *Config) { c.Retention = api.RetentionPolicy{KeepLast: 1} })
	ctx := context.Background()
	flaky, snaps := tc.storedWorkspace(t, "aaa-flaky", clock.Now(), 2, nil)
	other, _ := tc.storedWorkspace(t, "zzz-sound", clock.Now(), 2, nil)
	tc.s.archives.Blobs = flakyGet{Store: tc.s.archives.Blobs, key: snaps[1].ObjectKey}
	clock.Advance(48 * time.Hour)
	_, err := tc.s.GC(ctx, 0, false)
	if err != nil {
		t.Fatalf("gc stopped on one workspace's unreadable receipt: %v", err)
	}
	if n := len(receipts(t, tc, flaky.ID)); n != 2 {
		t.Fatalf("%d receipts of the workspace whose newest could not be read, want both kept", n)
	}
	if n := len(receipts(t, tc, other.ID)); n != 1 {
		t.Fatalf("%d receipts of the other workspace, want it pruned to its newest", n)
	}
}

// A workspace reopened, saved and closed again between gc's check of its newest receipt and its
// claim is not reclaimed on that check: its newest receipt is not the one verified (found in
// review).
func TestGCReclaimsOnlyBehindTheReceiptItVerified(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.closedWorkspace(t, "again", clock.Now(), 2)
	clock.Advance(48 * time.Hour)
	var newer api.Snapshot
	tc.s.gcStep = func(step string) error {
		if step == "candidate checked" && newer.ID == "" {
			// As a reopen, a save and a close would leave it: closed, with a newer receipt.
			newer = tc.storedReceipt(t, ws.ID, "newer work", clock.Now())
		}
		return nil
	}
	res, err := tc.s.GC(ctx, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if c := findCandidate(res, ws.ID); c == nil || c.Reclaimed || !strings.Contains(c.Why, "closed again") {
		t.Fatalf("candidate: %+v", c)
	}
	for _, snap := range append(snaps, newer) {
		if got := mustSnapshot(t, tc, snap.ID); got.ReclaimedAt != nil || !tc.objectExists(snap.ObjectKey) {
			t.Fatalf("%s was reclaimed on a check of another newest receipt", snap.ID)
		}
	}
	if got, _ := tc.s.store.GetWorkspace(ctx, ws.ID); got.State != api.StateClosed {
		t.Fatalf("state after the handed-back claim: %s", got.State)
	}
}

// A sweep claims a workspace that was reopened, saved (a receipt that does not verify) and
// closed again since its check, then stops (a crash). The next sweep, finishing that claim,
// verifies the newest receipt first and hands the claim back: nothing is reclaimed behind a
// receipt nobody verified (found in review).
func TestGCFinishingAClaimVerifiesTheNewestReceipt(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	ws, snaps := tc.closedWorkspace(t, "again", clock.Now(), 2)
	clock.Advance(48 * time.Hour)
	var newer api.Snapshot
	tc.s.gcStep = func(step string) error {
		if step == "candidate checked" && newer.ID == "" {
			newer = tc.storedReceipt(t, ws.ID, "newer work", clock.Now())
			// The newer receipt does not verify: its object is gone.
			if err := tc.s.blobs.Delete(ctx, newer.ObjectKey); err != nil {
				t.Fatal(err)
			}
			// The sweep's claim lands, then the sweep stops before its re-list.
			if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartReclaim, "", "gc: reclaim"); err != nil {
				t.Fatal(err)
			}
			return errors.New("crash after the claim")
		}
		return nil
	}
	if _, err := tc.s.GC(ctx, time.Hour, false); err == nil {
		t.Fatal("want the simulated crash")
	}
	tc.s.gcStep = nil
	res, err := tc.s.GC(ctx, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if c := findCandidate(res, ws.ID); c == nil || c.Reclaimed || !strings.Contains(c.Why, "does not verify") {
		t.Fatalf("second sweep's candidate: %+v", c)
	}
	if got, _ := tc.s.store.GetWorkspace(ctx, ws.ID); got.State != api.StateClosed {
		t.Fatalf("state after the handed-back claim: %s", got.State)
	}
	for _, snap := range snaps {
		if got := mustSnapshot(t, tc, snap.ID); got.ReclaimedAt != nil || !tc.objectExists(snap.ObjectKey) {
			t.Errorf("verified receipt %s reclaimed behind the unverified newest %s", snap.ID, newer.ID)
		}
	}
}
