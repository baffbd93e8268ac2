package controller

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/sandbox/snapshot"
	"golang.org/x/sys/unix"
)

// gateGet holds the first Get of key, once the object is open, until release is closed.
type gateGet struct {
	blob.Store
	key     string
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (g *gateGet) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	rc, info, err := g.Store.Get(ctx, key)
	if key == g.key {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	return rc, info, err
}

// Two captures of one workspace overlap: the first chose the newest receipt P as its parent,
// then another capture's receipt C was written (and, with prune, P was removed and gc freed its
// objects) before the first pinned P's. The first must neither publish a receipt naming freed
// objects nor sort its older tree after C: it starts again from C, and the newest receipt holds
// the newest tree and verifies (found in review).
func TestOverlappingCapturesPublishInOrder(t *testing.T) {
	for _, prune := range []bool{false, true} {
		name := map[bool]string{false: "overlap", true: "overlap-pruned"}[prune]
		t.Run(name, func(t *testing.T) {
			tc := newTestController(t)
			ctx := context.Background()
			lw := tc.liveWorkspaceIn(t, name, t.TempDir())
			writeFile(t, lw.root, "big.txt", strings.Repeat("unchanged bytes ", 4096))
			writeFile(t, lw.root, "small.txt", "one")
			// Files written within the racy window are read again, never taken as refs: aged
			// past it, the captures below refer to earlier receipts' bytes.
			waitPastRacyWindow(t, lw.root, "big.txt", "small.txt")
			p, err := tc.s.CaptureSnapshot(ctx, lw.workspaceID, api.CaptureOptions{})
			if err != nil {
				t.Fatal(err)
			}
			g := &gateGet{Store: tc.s.archives.Blobs, key: p.ManifestKey, reached: make(chan struct{}), release: make(chan struct{})}
			tc.s.archives.Blobs = g
			type result struct {
				snap api.Snapshot
				err  error
			}
			first := make(chan result, 1)
			go func() {
				snap, err := tc.s.CaptureSnapshot(ctx, lw.workspaceID, api.CaptureOptions{})
				first <- result{snap, err}
			}()
			select {
			case <-g.reached:
			case <-time.After(time.Minute):
				t.Fatal("the first capture never opened its parent's manifest")
			}
			writeFile(t, lw.root, "small.txt", "two")
			c, err := tc.s.CaptureSnapshot(ctx, lw.workspaceID, api.CaptureOptions{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			if prune {
				if _, err := tc.s.prune(ctx, lw.workspaceID, api.RetentionPolicy{KeepLast: 1}, false); err != nil {
					t.Fatal(err)
				}
				if _, err := tc.s.GC(ctx, 0, false); err != nil {
					t.Fatal(err)
				}
				if tc.objectExists(p.ObjectKey) {
					t.Fatalf("gc kept %s, which no receipt and no running capture needed yet", p.ObjectKey)
				}
			}
			close(g.release)
			r := <-first
			if r.err != nil {
				t.Fatalf("the overlapped capture failed instead of starting again: %v", r.err)
			}
			list := receipts(t, tc, lw.workspaceID)
			if newest := list[len(list)-1]; newest.ID != r.snap.ID || r.snap.Parent != c.ID || !r.snap.CreatedAt.After(c.CreatedAt) {
				t.Fatalf("receipts %v: want the overlapped capture %s newest, after %s and from it", ids(list), r.snap.ID, c.ID)
			}
			// big.txt, unchanged since P, is a ref to the receipt the capture started again from.
			if len(r.snap.Layers) == 0 {
				t.Fatalf("receipt %s refers to no earlier receipt: the overlap was not of incremental captures", r.snap.ID)
			}
			for _, k := range append([]string{r.snap.ObjectKey}, r.snap.Layers...) {
				if !tc.objectExists(k) {
					t.Fatalf("receipt %s names %s, which is gone", r.snap.ID, k)
				}
			}
			if res, err := tc.s.verifySnapshot(ctx, r.snap); err != nil || !res.OK {
				t.Fatalf("verify %s: %+v, %v", r.snap.ID, res, err)
			}
		})
	}
}

// waitPastRacyWindow returns once every named file under root last changed more than
// snapshot.RacyWindow ago, so that a capture's cache may vouch for it (cache.go).
func waitPastRacyWindow(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, name), &st); err != nil {
			t.Fatal(err)
		}
		// The cache compares whole stamps against its start: a tick past the window is enough.
		past := time.Unix(st.Ctim.Unix()).Add(snapshot.RacyWindow + 10*time.Millisecond)
		for left := time.Until(past); left > 0; left = time.Until(past) {
			time.Sleep(left)
		}
	}
}

func ids(list []api.Snapshot) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.ID)
	}
	return out
}

// gateAppend holds the first checkpoint receipt's AppendSnapshot until release is closed.
type gateAppend struct {
	store.Store
	gated   atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func (g *gateAppend) AppendSnapshot(ctx context.Context, snap api.Snapshot) (api.Snapshot, error) {
	if snap.Checkpoint && g.gated.CompareAndSwap(false, true) {
		close(g.reached)
		<-g.release
	}
	return g.Store.AppendSnapshot(ctx, snap)
}

// A checkpoint in flight when close saved loses the race and, the workspace closing, ends:
// started again, it would
// capture the closing workspace after close's receipt and publish what teardown did to the tree
// as the newest receipt, which reopen restores (found in review).
func TestCheckpointLosingToCloseEnds(t *testing.T) {
	tc := newTestController(t)
	ctx := context.Background()
	lw := tc.liveWorkspaceIn(t, "closerace", t.TempDir())
	writeFile(t, lw.root, "data.txt", "work")
	waitPastRacyWindow(t, lw.root, "data.txt") // captures take refs
	if _, err := tc.s.CaptureSnapshot(ctx, lw.workspaceID, api.CaptureOptions{}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, lw.root, "data.txt", "more work")
	g := &gateAppend{Store: tc.s.store, reached: make(chan struct{}), release: make(chan struct{})}
	tc.s.store = g
	ws, err := tc.s.store.GetWorkspace(ctx, lw.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		snap api.Snapshot
		err  error
	}
	cp := make(chan result, 1)
	go func() {
		snap, err := tc.s.captureWorkspaceAs(ctx, ws, captureOpts{checkpoint: true})
		cp <- result{snap, err}
	}()
	<-g.reached
	// close: StartClose, its capture, then teardown changes the tree (it "goes with the sandbox").
	if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartClose, "", "close"); err != nil {
		t.Fatal(err)
	}
	closeSnap, err := tc.s.captureWorkspace(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(lw.root, "data.txt")); err != nil { // teardown
		t.Fatal(err)
	}
	close(g.release)
	r := <-cp
	list := receipts(t, tc, ws.ID)
	newest := list[len(list)-1]
	if !errors.Is(r.err, errReceiptRaced) {
		t.Fatalf("the overtaken checkpoint: %+v, %v; want it ended as raced", r.snap, r.err)
	}
	if newest.ID != closeSnap.ID {
		t.Fatalf("the newest receipt of the closing workspace is %s (checkpoint=%v, entries %d, tree %s), not close's %s (entries %d): reopen restores teardown's tree",
			newest.ID, newest.Checkpoint, newest.Entries, strings.TrimSpace(newest.Summary.Tree)[:12], closeSnap.ID, closeSnap.Entries)
	}
}
