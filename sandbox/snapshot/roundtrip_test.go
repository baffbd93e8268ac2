package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// sampleTree builds a workspace with every kind of entry Capture handles.
func sampleTree(t testing.TB) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "README.md"), "hello\n", 0o644)
	writeFile(t, filepath.Join(dir, "bin/run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	writeFile(t, filepath.Join(dir, "secret/key"), "k", 0o600)
	writeFile(t, filepath.Join(dir, "ro/file"), "read only", 0o444)
	writeFile(t, filepath.Join(dir, "a-b"), "sorts between a and a/", 0o644)
	writeFile(t, filepath.Join(dir, "a/z"), "z", 0o644)
	writeFile(t, filepath.Join(dir, "unicodé/ファイル.txt"), "✓", 0o644)
	long := strings.Repeat("long-name-", 20)
	writeFile(t, filepath.Join(dir, long, long+".txt"), "pax path", 0o644)
	writeFile(t, filepath.Join(dir, "empty-file"), "", 0o644)
	must(t, os.MkdirAll(filepath.Join(dir, "empty/dir"), 0o755))
	must(t, os.Symlink("../README.md", filepath.Join(dir, "bin/readme-link")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "abs-link")))
	must(t, os.Symlink("does/not/exist", filepath.Join(dir, "dangling")))
	must(t, os.Symlink("a", filepath.Join(dir, "dir-link")))
	big := make([]byte, 3<<20+17)
	rand.Read(big)
	must(t, os.WriteFile(filepath.Join(dir, "blob.bin"), big, 0o644))
	// Sub-second mtimes everywhere, set deepest first.
	base := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	var paths []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	for i := len(paths) - 1; i >= 0; i-- {
		mt := base.Add(time.Duration(i) * time.Second)
		must(t, lchtimes(paths[i], mt))
	}
	must(t, os.Chmod(filepath.Join(dir, "ro"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	return dir
}

func TestRoundTrip(t *testing.T) {
	src := sampleTree(t)
	mkfifo(t, filepath.Join(src, "pipe"))
	want := describe(t, src, true, func(rel string) bool { return rel == "pipe" })
	data, m := capture(t, src)

	for _, tc := range []struct{ name, dir string }{{"absent target", "restored"}, {"root", "."}, {"empty dir", "existing"}} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			if tc.dir == "existing" {
				must(t, os.Mkdir(filepath.Join(dst, "existing"), 0o755))
			}
			got, err := restoreInto(t, data, dst, tc.dir)
			must(t, err)
			if got.SHA256 != m.SHA256 || got.Totals != m.Totals {
				t.Fatalf("restore returned manifest %s %+v, capture %s %+v", got.SHA256, got.Totals, m.SHA256, m.Totals)
			}
			out := filepath.Join(dst, tc.dir)
			if d := diffMaps(want, describe(t, out, true, nil)); d != "" {
				t.Fatalf("restored tree differs:\n%s", d)
			}
			noLeftovers(t, dst)
			os.Chmod(filepath.Join(out, "ro"), 0o755)
		})
	}

	skipped := map[string]string{}
	for _, s := range m.Skipped {
		skipped[s.Path] = s.Type + "/" + s.Reason
	}
	if skipped["pipe"] != "fifo/special file" || len(skipped) != 1 {
		t.Fatalf("skipped = %v", skipped)
	}
	if m.Totals.Files == 0 || m.Totals.Dirs == 0 || m.Totals.Symlinks != 4 || m.Git != nil {
		t.Fatalf("totals %+v git %+v", m.Totals, m.Git)
	}
	if m.WorkspaceID != "ws-1" || m.Epoch != 3 || m.ToolVersion != "test" || m.Version != FormatVersion {
		t.Fatalf("manifest header %+v", m)
	}
}

func TestRestoreRefusesNonEmptyTarget(t *testing.T) {
	data, _ := capture(t, sampleTree(t))
	dst := t.TempDir()
	writeFile(t, filepath.Join(dst, "keep"), "mine", 0o644)
	before := describe(t, dst, true, nil)
	_, err := restoreInto(t, data, dst, ".")
	wantCode(t, err, CodeExists)
	if d := diffMaps(before, describe(t, dst, true, nil)); d != "" {
		t.Fatalf("target changed by a refused restore into the root:\n%s", d)
	}
	must(t, os.Mkdir(filepath.Join(dst, "d"), 0o755))
	writeFile(t, filepath.Join(dst, "d/x"), "x", 0o644)
	before = describe(t, dst, true, nil)
	_, err = restoreInto(t, data, dst, "d")
	wantCode(t, err, CodeExists)
	_, err = restoreInto(t, data, dst, "missing/parent")
	if err == nil {
		t.Fatal("restore under a missing parent succeeded")
	}
	if d := diffMaps(before, describe(t, dst, true, nil)); d != "" {
		t.Fatalf("target changed:\n%s", d)
	}
}

// readTar decodes a snapshot with klauspost's zstd and archive/tar.
func readTar(t testing.TB, data []byte) (names []string, last []byte, hdrs []*tar.Header) {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(data))
	must(t, err)
	defer dec.Close()
	tr := tar.NewReader(dec)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		must(t, err)
		b, err := io.ReadAll(tr)
		must(t, err)
		names = append(names, h.Name)
		hdrs = append(hdrs, h)
		last = b
	}
}

func TestArchiveFormat(t *testing.T) {
	src := sampleTree(t)
	data, m := capture(t, src)
	names, last, hdrs := readTar(t, data)
	if names[len(names)-1] != ManifestName {
		t.Fatalf("last entry is %s", names[len(names)-1])
	}
	var fromTar Manifest
	must(t, json.Unmarshal(last, &fromTar))
	if len(fromTar.Entries) != len(names)-1 || fromTar.Totals != m.Totals {
		t.Fatalf("manifest in archive: %d entries, %+v; archive holds %d", len(fromTar.Entries), fromTar.Totals, len(names)-1)
	}
	for i, h := range hdrs[:len(hdrs)-1] {
		if h.Format != tar.FormatPAX && h.Format != tar.FormatUSTAR|tar.FormatPAX && !strings.Contains(h.Format.String(), "PAX") {
			t.Fatalf("%s: format %v", h.Name, h.Format)
		}
		if p := strings.TrimSuffix(h.Name, "/"); p != fromTar.Entries[i].Path {
			t.Fatalf("entry %d: archive %s, manifest %s", i, p, fromTar.Entries[i].Path)
		}
	}
	// Lexical order, depth first: "a", "a/z", "a-b".
	idx := map[string]int{}
	for i, n := range names {
		idx[strings.TrimSuffix(n, "/")] = i
	}
	if !(idx["a"] < idx["a/z"] && idx["a/z"] < idx["a-b"]) {
		t.Fatalf("order: a=%d a/z=%d a-b=%d", idx["a"], idx["a/z"], idx["a-b"])
	}
	if js, _ := json.Marshal(m); !bytes.Equal(js, last) {
		t.Fatal("the archived manifest is not json.Marshal of the returned one")
	}
	rm, err := ReadManifest(context.Background(), bytes.NewReader(data))
	must(t, err)
	if rm.SHA256 != m.SHA256 || rm.JSONSize != m.JSONSize || len(rm.Entries) != len(m.Entries) {
		t.Fatalf("ReadManifest %s/%d, Capture %s/%d", rm.SHA256, rm.JSONSize, m.SHA256, m.JSONSize)
	}
}

// TestPlainToolsRead: the archive opens with the zstd and tar command
// lines, and yields the same tree.
func TestPlainToolsRead(t *testing.T) {
	needTool(t, "zstd")
	needTool(t, "tar")
	src := sampleTree(t)
	data, _ := capture(t, src)
	dst := t.TempDir()
	cmd := exec.Command("sh", "-c", "zstd -dc | tar -xf - -C "+dst)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zstd -d | tar -x: %v\n%s", err, out)
	}
	defer os.Chmod(filepath.Join(dst, "ro"), 0o755)
	// tar applies the umask to modes, so compare contents, types and link
	// targets only, and check the last member with tar -t.
	strip := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v[strings.IndexByte(v, ' ')+1:]
		}
		return out
	}
	got := describe(t, dst, false, func(rel string) bool { return rel == ManifestName })
	if d := diffMaps(strip(describe(t, src, false, nil)), strip(got)); d != "" {
		t.Fatalf("tar -x differs:\n%s", d)
	}
	cmd = exec.Command("sh", "-c", "zstd -dc | tar -tf - | tail -n 1")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	must(t, err)
	if strings.TrimSpace(string(out)) != ManifestName {
		t.Fatalf("tar -t last member: %q", out)
	}
}
