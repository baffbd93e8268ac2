package savedcopy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/internal/routine"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
	"github.com/tetherhq/tether/sandbox/snapshot/snapshottest"
)

// countingBlobs counts the objects opened and, when sample is set, calls it every MiB read.
type countingBlobs struct {
	blob.Store
	gets   atomic.Int64
	sample func()
}

func (c *countingBlobs) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	c.gets.Add(1)
	rc, info, err := c.Store.Get(ctx, key)
	if err != nil || c.sample == nil {
		return rc, info, err
	}
	return &sampledReader{ReadCloser: rc, sample: c.sample}, info, nil
}

type sampledReader struct {
	io.ReadCloser
	n      int64
	sample func()
}

func (r *sampledReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if r.n/(1<<20) != (r.n+int64(n))/(1<<20) {
		r.sample()
	}
	r.n += int64(n)
	return n, err
}

// savedIndexes is the index cache a controller on data would have, over a directory blob store.
func savedIndexes(t *testing.T, data string) (*Indexes, *countingBlobs) {
	st, err := blob.OpenDir(filepath.Join(data, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	cb := &countingBlobs{Store: st}
	builds := routine.New(context.Background(), nil)
	t.Cleanup(builds.Stop)
	return NewIndexes(filepath.Join(data, "cache", "saved-index"), Archives{Blobs: cb}, slog.New(slog.NewTextHandler(io.Discard, nil)), builds.Go), cb
}

// storeSynthetic stores tree's archive through a pipe and returns its receipt (the summary's
// digests left empty: the archive is never held whole).
func storeSynthetic(t *testing.T, blobs blob.Store, tree snapshottest.Tree) *api.Snapshot {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tree.Write(pw, nil)) }()
	info, err := blobs.Put(context.Background(), "snapshots/synthetic", pr, "")
	if err != nil {
		t.Fatal(err)
	}
	return &api.Snapshot{ID: "snap_synthetic", ObjectKey: info.Key, Bytes: info.Size, SHA256: info.SHA256,
		Summary: protocol.SnapshotSummary{Entries: tree.Entries(), Bytes: int64(tree.Dirs * ((tree.Files + 999) / 1000) * len("d0000/f0000"))}}
}

// pageThrough lists dir a page of limit at a time, returning the names in order and the pages.
func pageThrough(t *testing.T, s *Indexes, snap *api.Snapshot, dir string, limit int) ([]string, int) {
	var names []string
	pages := 0
	for cursor := ""; ; pages++ {
		idx, err := s.Open(context.Background(), snap)
		if err != nil {
			t.Error(err)
			return nil, 0
		}
		e, pos, err := idx.Lookup(snap, dir)
		if err != nil {
			idx.Close()
			t.Error(err)
			return nil, 0
		}
		page, err := idx.List(e, pos, dir, cursor, fmt.Sprint(limit))
		idx.Close()
		if err != nil {
			t.Error(err)
			return nil, 0
		}
		for _, fi := range page.Entries {
			names = append(names, fi.Name)
		}
		if page.Next == "" {
			return names, pages + 1
		}
		cursor = page.Next
	}
}

func wantNames(t *testing.T, got []string, prefix string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d names, want %d", len(got), n)
	}
	for i, name := range got {
		if want := fmt.Sprintf("%s%04d", prefix, i); name != want {
			t.Fatalf("name %d is %s, want %s", i, name, want)
		}
	}
}

// TestSavedIndexLookups: paths resolve as the runner's guard resolves them, listings page in
// name order, concurrent first reads share one read of the archive, and a new controller
// verifies the archive again before it serves from it.
func TestSavedIndexLookups(t *testing.T) {
	data := t.TempDir()
	s, cb := savedIndexes(t, data)
	tree := snapshottest.Tree{Dirs: 3, Files: 1200}
	var arch bytes.Buffer
	if err := tree.Write(&arch, nil); err != nil {
		t.Fatal(err)
	}
	v, err := snapshot.Verify(context.Background(), bytes.NewReader(arch.Bytes()), snapshot.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cb.Put(context.Background(), "snapshots/small", bytes.NewReader(arch.Bytes()), "")
	if err != nil {
		t.Fatal(err)
	}
	snap := &api.Snapshot{ID: "snap_small", ObjectKey: info.Key, Bytes: info.Size, SHA256: info.SHA256,
		Summary: protocol.SnapshotSummary{Entries: v.Totals.Entries, Bytes: v.Totals.Bytes, Manifest: v.ManifestSHA256, Tree: v.TreeSHA256}}

	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names, _ := pageThrough(t, s, snap, "d0001", 97)
			wantNames(t, names, "f", tree.Files)
		}()
	}
	wg.Wait()
	roots, _ := pageThrough(t, s, snap, ".", 2)
	wantNames(t, roots, "d", tree.Dirs)

	idx, err := s.Open(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	probes := map[string]protocol.Code{"d0002/f1199": "", "d0000": "", "d0002/f1200": protocol.CodeNotFound,
		"nope": protocol.CodeNotFound, "d0001/f0000/x": protocol.CodeNotDirectory, "d0000/f0000": ""}
	for p, code := range probes {
		e, pos, err := idx.Lookup(snap, p)
		if protocol.CodeOf(err) != code && (code != "" || err != nil) {
			t.Fatalf("lookup %s: %v, want %q", p, err, code)
		}
		if err == nil && (e.Path != p || pos < 0) {
			t.Fatalf("lookup %s: %+v at %d", p, e, pos)
		}
	}
	if e, _, _ := idx.Lookup(snap, "d0000/f0000"); e.Size == 0 || e.SHA256 == "" {
		t.Fatalf("a file's entry: %+v", e)
	}
	if n := cb.gets.Load(); n != 1 {
		t.Fatalf("the archive was opened %d times", n)
	}

	// A new controller on the same data dir does not trust what the last one indexed.
	s2, cb2 := savedIndexes(t, data)
	if _, err := s2.Open(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	if n := cb2.gets.Load(); n != 1 {
		t.Fatalf("the new controller opened the archive %d times", n)
	}
	// A receipt the archive does not match gets no index.
	bad := *snap
	bad.ID, bad.Summary.Tree = "snap_bad", "00"
	if _, err := s2.Open(context.Background(), &bad); protocol.CodeOf(err) != protocol.CodeCorrupt {
		t.Fatalf("a receipt the archive does not match: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(s2.Dir(), "*"))
	if len(left) != 1 {
		t.Fatalf("index files: %v", left)
	}
	t.Logf("saved-index: %d concurrent pagers and %d probes, archive read once per controller", 3, len(probes))
}

// TestSavedIndexLargeSnapshot: paging through a 300,300-entry saved copy reads the archive once
// and the heap stays bounded while the index is built and read (the manifest held in memory
// needed several hundred MiB for as many entries, and was read again for every page).
func TestSavedIndexLargeSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("stores and indexes 300,300 entries")
	}
	const bound = 64 << 20
	s, cb := savedIndexes(t, t.TempDir())
	tree := snapshottest.Tree{Dirs: 300, Files: 1000}
	snap := storeSynthetic(t, cb, tree)
	runtime.GC()
	var mu sync.Mutex
	var peak uint64
	cb.sample = func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak = max(peak, ms.HeapInuse)
		mu.Unlock()
	}
	names, pages := pageThrough(t, s, snap, "d0299", 100)
	wantNames(t, names, "f", tree.Files)
	cb.sample()
	st, err := os.Stat(filepath.Join(s.Dir(), snap.ID+"-"+snap.SHA256+".idx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved-index-large: %d entries, %d pages listed, %d archive reads, index %d MiB, peak HeapInuse %.1f MiB (bound %d MiB)",
		tree.Entries(), pages, cb.gets.Load(), st.Size()>>20, float64(peak)/(1<<20), bound>>20)
	if n := cb.gets.Load(); n != 1 {
		t.Fatalf("%d pages opened the archive %d times", pages, n)
	}
	if peak > bound {
		t.Fatalf("peak HeapInuse %d MiB, more than %d MiB", peak>>20, bound>>20)
	}
}
