package snapshot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// captureWith captures dir with the cache of stateDir (when refs), recording a new cache whose
// knowledge dates from start.
func captureWith(t *testing.T, dir, stateDir, snapID string, refs bool, start time.Time) ([]byte, *Manifest) {
	t.Helper()
	var c *Cache
	if refs {
		var err error
		c, err = OpenCache(stateDir)
		must(t, err)
		if c == nil {
			t.Fatal("no cache")
		}
		defer c.Close()
	}
	cw, err := NewCacheWriter(stateDir, "ws-1", snapID, start)
	must(t, err)
	var buf bytes.Buffer
	m, err := Capture(context.Background(), openRoot(t, dir), &buf, CaptureOptions{WorkspaceID: "ws-1", Epoch: 3, Parent: "parent", ToolVersion: "test", Refs: c, Record: cw})
	if err != nil {
		cw.Abort()
		t.Fatalf("capture: %v", err)
	}
	must(t, cw.Commit())
	return buf.Bytes(), m
}

func refPaths(m *Manifest) map[string]bool {
	out := map[string]bool{}
	for _, e := range m.Entries {
		if e.Ref {
			out[e.Path] = true
		}
	}
	return out
}

func archivedNames(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	_, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{AllowRefs: true, OnEntry: func(e Entry) error {
		names = append(names, e.Path)
		return nil
	}})
	must(t, err)
	return names
}

func TestIncrementalCaptureRefsUnchangedFiles(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha", 0o644)
	must(t, os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755))
	writeFile(t, filepath.Join(dir, "d", "e", "b.txt"), "bravo", 0o644)
	writeFile(t, filepath.Join(dir, "d-c.txt"), "charlie", 0o755)
	must(t, os.Symlink("a.txt", filepath.Join(dir, "link")))
	// The cache's knowledge dates from after every write here, past the racy window: what a
	// capture that began a while after the writes would record.
	later := time.Now().Add(time.Second)
	captureWith(t, dir, state, "snap-1", false, later)

	writeFile(t, filepath.Join(dir, "d", "e", "b.txt"), "BRAVO!", 0o644)
	data, m := captureWith(t, dir, state, "snap-2", true, later.Add(time.Second))
	if got, want := refPaths(m), map[string]bool{"a.txt": true, "d-c.txt": true}; !equalSets(got, want) {
		t.Fatalf("refs %v, want %v", got, want)
	}
	names := archivedNames(t, data)
	for _, n := range names {
		if n == "a.txt" || n == "d-c.txt" {
			t.Fatalf("a ref's bytes were archived: %v", names)
		}
	}
	// The tree digests as a full capture of the same tree does.
	_, full := capture(t, dir)
	a, err := TreeDigest(m.Entries)
	must(t, err)
	b, err := TreeDigest(full.Entries)
	must(t, err)
	if a != b || m.Totals != full.Totals {
		t.Fatalf("incremental tree %s %+v, full %s %+v", a, m.Totals, b, full.Totals)
	}
	// The digest the runner's summary takes from the streamed manifest is the same one.
	if _, streamed, err := ManifestDigests(m); err != nil || streamed != b {
		t.Fatalf("the streamed manifest's tree digest is %s, %v; want %s", streamed, err, b)
	}
	v, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{AllowRefs: true})
	must(t, err)
	if v.TreeSHA256 != b || v.Totals != full.Totals {
		t.Fatalf("verified tree %s %+v, want %s %+v", v.TreeSHA256, v.Totals, b, full.Totals)
	}
	// A capture that was not asked to be incremental may not hold refs.
	_, err = Verify(context.Background(), bytes.NewReader(data), VerifyOptions{})
	wantCode(t, err, CodeCorrupt)
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// A file changed within the racy window of the cache's start is read again even though its
// stamp equals the cache's, and an in-place rewrite of the same size whose mtime was put back
// (touch -r) is captured with its new bytes.
func TestIncrementalCaptureRereadsRacyFiles(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	p := filepath.Join(dir, "f.txt")
	writeFile(t, p, "old content", 0o644)
	fi, err := os.Stat(p)
	must(t, err)
	// The cache starts now: f.txt changed within the window before it.
	captureWith(t, dir, state, "snap-1", false, time.Now())
	_, m := captureWith(t, dir, state, "snap-2", true, time.Now())
	if len(refPaths(m)) != 0 {
		t.Fatalf("a file changed within the racy window was taken as a ref: %v", refPaths(m))
	}

	// Rewritten in place with the same size, its mtime put back.
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("new content"), 0)
	must(t, err)
	must(t, f.Close())
	must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
	data, m := captureWith(t, dir, state, "snap-3", true, time.Now())
	if len(refPaths(m)) != 0 {
		t.Fatalf("the rewritten file was taken as a ref")
	}
	got := restoreData(t, data)
	if got["f.txt"] != "new content" {
		t.Fatalf("restored %q, want the new content", got["f.txt"])
	}
}

// restoreData reads the files of a full archive.
func restoreData(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := t.TempDir()
	_, err := restoreInto(t, data, out, "r")
	must(t, err)
	b, err := os.ReadFile(filepath.Join(out, "r", "f.txt"))
	must(t, err)
	return map[string]string{"f.txt": string(b)}
}

// A cache that belongs to the parent but whose files all changed gives no refs; one that is
// damaged is ignored from the damage on.
func TestCacheReadDefensively(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), "a", 0o644)
	writeFile(t, filepath.Join(dir, "b"), "b", 0o644)
	later := time.Now().Add(time.Second)
	captureWith(t, dir, state, "snap-1", false, later)
	path := filepath.Join(state, CacheFileName)
	raw, err := os.ReadFile(path)
	must(t, err)
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
	if len(lines) != 3 {
		t.Fatalf("cache has %d lines, want a header and 2 files", len(lines))
	}
	// The second file's line cut short: a is a ref, b is read.
	must(t, os.WriteFile(path, bytes.Join([][]byte{lines[0], lines[1], lines[2][:10]}, []byte("\n")), 0o600))
	_, m := captureWith(t, dir, state, "snap-2", true, later)
	if got := refPaths(m); !equalSets(got, map[string]bool{"a": true}) {
		t.Fatalf("refs %v, want only a", got)
	}
	// Out of order: the cache ends where the order breaks.
	must(t, os.WriteFile(path, bytes.Join([][]byte{lines[0], lines[2], lines[1]}, []byte("\n")), 0o600))
	_, m = captureWith(t, dir, state, "snap-3", true, later)
	if got := refPaths(m); !equalSets(got, map[string]bool{"b": true}) {
		t.Fatalf("refs %v, want b alone: a's line comes out of order after b's and is never used", got)
	}
	// A header of another version: no cache.
	must(t, os.WriteFile(path, []byte(`{"version":99,"snapshot_id":"x"}`+"\n"), 0o600))
	if _, err := OpenCache(state); err == nil {
		t.Fatal("a cache of another version was opened")
	}
}

func TestCmpTree(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"a/b", "a-c", -1}, {"a", "a/b", -1}, {"a/b", "a/b", 0}, {"b", "a/z", 1}, {"a/c", "a/b/z", 1}} {
		if got := cmpTree(c.a, c.b); got != c.want {
			t.Errorf("cmpTree(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Verify refuses a ref whose bytes are in the archive too, and a malformed ref.
func TestVerifyRefusesBadRefs(t *testing.T) {
	ents := []hent{hfile("a", "alpha"), hfile("b", "bravo")}
	// a is a ref in the manifest, but its tar entry is there as well.
	data := buildArchive(t, ents, func(m *Manifest) { m.Entries[0].Ref = true })
	_, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{AllowRefs: true})
	wantCode(t, err, CodeCorrupt)
	// A consistent incremental archive verifies.
	data = buildArchive(t, ents[1:], func(m *Manifest) {
		full := consistentManifest(ents)
		full.Entries[0].Ref = true
		m.Entries, m.Totals = full.Entries, full.Totals
	})
	if _, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{AllowRefs: true}); err != nil {
		t.Fatalf("incremental archive: %v", err)
	}
	// A ref that is a directory, or has no SHA-256; one with a link target, or a time no archive
	// header keeps (Go's zero time is written as 1970), which a restore could never reproduce.
	for _, bad := range []func(*Entry){
		func(e *Entry) { e.Type, e.SHA256, e.Size = TypeDir, "", 0 },
		func(e *Entry) { e.SHA256 = "zz" },
		func(e *Entry) { e.Path = "../x" },
		func(e *Entry) { e.LinkTarget = "/etc/passwd" },
		func(e *Entry) { e.MTime = time.Time{} },
	} {
		data = buildArchive(t, ents[1:], func(m *Manifest) {
			full := consistentManifest(ents)
			full.Entries[0].Ref = true
			bad(&full.Entries[0])
			m.Entries, m.Totals = full.Entries, full.Totals
		})
		if _, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{AllowRefs: true}); err == nil {
			t.Fatal("a malformed ref verified")
		}
	}
}
