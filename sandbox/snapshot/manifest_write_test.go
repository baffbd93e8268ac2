package snapshot

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/tetherhq/tether/sandbox/gitstate"
)

// The streamed manifest must be byte for byte json.Marshal's: the controller hashes the
// archived bytes and compares them with the runner's summary, and older readers decode it.
func TestEncodeManifestIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 12, 2, 9, 0, 0, 123, time.UTC)
	tricky := `"entries":null <a&b> ` + "\u2028 é"
	cases := map[string]*Manifest{
		"nil entries":   {Version: FormatVersion, WorkspaceID: tricky, CreatedAt: at},
		"empty entries": {Version: FormatVersion, Entries: []Entry{}, Skipped: []Skipped{}},
		"full": {Version: FormatVersion, WorkspaceID: "ws", Epoch: 7, Parent: tricky, ToolVersion: "v1", CreatedAt: at,
			Entries: []Entry{
				{Path: "a", Type: TypeDir, Mode: 0o755, MTime: at},
				{Path: "a/" + tricky, Type: TypeFile, Mode: 0o644, Size: 3, SHA256: "ab", MTime: at},
				{Path: "a/l", Type: TypeSymlink, Mode: 0o777, LinkTarget: "../x", MTime: at},
			},
			Skipped: []Skipped{{Path: "p", Type: "fifo", Reason: "special file"}},
			Totals:  Totals{Entries: 3, Files: 1, Dirs: 1, Symlinks: 1, Bytes: 3},
			Git:     &gitstate.State{Head: "abc", Branch: "main", Ahead: 2}, GitError: tricky},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			tree := newEntryDigest()
			if err := encodeManifest(&got, m, tree); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("streamed manifest differs from json.Marshal:\n got %s\nwant %s", got.Bytes(), want)
			}
			entries, _ := json.Marshal(m.Entries)
			wantTree := sha256.Sum256(entries)
			wantSum := sha256.Sum256(want)
			sum, treeSum, err := ManifestDigests(m)
			if err != nil {
				t.Fatal(err)
			}
			if sum != hex.EncodeToString(wantSum[:]) || treeSum != hex.EncodeToString(wantTree[:]) {
				t.Fatalf("digests %s %s, want %x %x", sum, treeSum, wantSum, wantTree)
			}
			var arch bytes.Buffer
			tw := tar.NewWriter(&arch)
			if err := writeManifest(tw, m); err != nil {
				t.Fatal(err)
			}
			tw.Close()
			if m.SHA256 != sum || m.TreeSHA256 != treeSum || m.JSONSize != int64(len(want)) {
				t.Fatalf("writeManifest recorded %s %s %d, want %s %s %d", m.SHA256, m.TreeSHA256, m.JSONSize, sum, treeSum, len(want))
			}
			tr := tar.NewReader(&arch)
			if _, err := tr.Next(); err != nil {
				t.Fatal(err)
			}
			if body, _ := io.ReadAll(tr); !bytes.Equal(body, want) {
				t.Fatalf("archived manifest differs from json.Marshal")
			}
		})
	}
}
