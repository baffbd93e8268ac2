package savedcopy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Composing a receipt whose refs are sparse files of one layer reads that layer twice in all (its
// data regions are found by a second reader moving forward with the first), not once more per
// sparse file: that was N object reads each decoding the layer up to its file, O(N²) work a
// hostile runner chose N of, paid by every restore, export and verify (found in review).
func TestComposeSparseRefsReadEachLayerTwice(t *testing.T) {
	const n = 40
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(4 << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	root, err := fsguard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var parent bytes.Buffer
	m, err := snapshot.Capture(context.Background(), root, &parent, snapshot.CaptureOptions{WorkspaceID: "w", Epoch: 1, ToolVersion: "t"})
	if err != nil {
		t.Fatal(err)
	}
	sparse := 0
	for _, e := range m.Entries {
		if e.Sparse {
			sparse++
		}
	}
	if sparse != n {
		t.Skipf("filesystem gave %d sparse files of %d", sparse, n)
	}
	st, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cb := &countingBlobs{Store: st}
	ctx := context.Background()
	pinfo, err := st.Put(ctx, "snapshots/w/p.tar.zst", bytes.NewReader(parent.Bytes()), "")
	if err != nil {
		t.Fatal(err)
	}
	// The incremental receipt: every file a ref into the parent (layer 1).
	snap := api.Snapshot{ID: "snap_inc", WorkspaceID: "w", ObjectKey: "snapshots/w/inc.tar.zst", ManifestKey: "snapshots/w/inc.manifest.zst",
		Layers: []string{pinfo.Key}}
	var rm bytes.Buffer
	w, err := NewResolvedWriter(&rm, nil, ResolvedHeader{Snapshot: snap.ID, Layers: []Layer{{Key: pinfo.Key, Bytes: pinfo.Size, SHA256: pinfo.SHA256}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Entries {
		l := 0
		if e.Type == snapshot.TypeFile {
			l = 1
		}
		if err := w.Add(ResolvedEntry{Entry: e, Layer: l}); err != nil {
			t.Fatal(err)
		}
	}
	meta := []byte(`{"version":1,"workspace_id":"w","epoch":1,"parent":"","tool_version":"t","created_at":"2024-01-01T00:00:00Z","entries":[],"skipped":[],"totals":{}}`)
	tree, _ := snapshot.TreeDigest(m.Entries)
	if err := w.End(meta, tree); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, snap.ManifestKey, &rm, ""); err != nil {
		t.Fatal(err)
	}
	snap.Summary = protocol.SnapshotSummary{Entries: m.Totals.Entries, Bytes: m.Totals.Bytes, Tree: tree}
	a := Archives{Blobs: cb, Go: func(name string, fn func(context.Context)) bool { go fn(ctx); return true }}
	r, done, err := a.Open(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, r)
	done()
	if err != nil {
		t.Fatal(err)
	}
	// Two reads of the resolved manifest, and two of the layer.
	if got := cb.gets.Load(); got != 4 {
		t.Errorf("composing %d sparse refs opened %d objects, want 4", n, got)
	}
}
