package fsguard

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
)

// A restore writes tens of thousands of small files through one root: each write must reuse a
// pooled copy buffer, not allocate a fresh 256 KiB one.
func TestWriteFileReusesCopyBuffer(t *testing.T) {
	r, err := Open(t.TempDir())
	must(t, err)
	defer r.Close()
	ctx := context.Background()
	content := bytes.Repeat([]byte("x"), 1000)
	write := func(i int) {
		_, err := r.WriteFile(ctx, fmt.Sprintf("f%d", i), bytes.NewReader(content), 0o644, WriteOptions{NoSync: true})
		must(t, err)
	}
	write(-1) // fills the pool
	const n = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		write(i)
	}
	runtime.ReadMemStats(&after)
	// One fresh buffer per write would be 256 KiB a write (50 MiB in all).
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > CopyBufSize/4 {
		t.Fatalf("each small write allocated %d bytes on average; want the copy buffer reused (< %d)", per, CopyBufSize/4)
	}
}

// A large write hands its pages to writeback as it goes, so its final fsync has little left.
func TestWritebackStartsAsDataIsWritten(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/big")
	must(t, err)
	defer f.Close()
	w := &Writeback{F: f}
	chunk := make([]byte, 1<<20)
	for range 3 * writebackStep / len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if w.off != 3*writebackStep || w.flushed != w.off {
		t.Fatalf("wrote %d bytes, handed %d to writeback; want all %d", w.off, w.flushed, 3*writebackStep)
	}
}

// An in-place write creates the file under its final name (no temporary, no rename), refuses
// anything already there without following it, and leaves nothing behind when it fails.
func TestWriteFileInPlace(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir)
	must(t, err)
	defer r.Close()
	ctx := context.Background()
	opts := WriteOptions{NoSync: true, InPlace: true}
	res, err := r.WriteFile(ctx, "a", bytes.NewReader([]byte("hello")), 0o640, opts)
	must(t, err)
	if got, err := os.ReadFile(dir + "/a"); err != nil || string(got) != "hello" || res.Bytes != 5 {
		t.Fatalf("in-place write: %q, %v, %+v", got, err, res)
	}
	if fi, _ := os.Stat(dir + "/a"); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", fi.Mode().Perm())
	}
	must(t, os.Symlink(dir+"/outside", dir+"/link"))
	_, err = r.WriteFile(ctx, "link", bytes.NewReader([]byte("x")), 0o644, opts)
	wantCode(t, err, CodeExists)
	if _, err := os.Lstat(dir + "/outside"); !os.IsNotExist(err) {
		t.Fatalf("in-place write followed a symlink: %v", err)
	}
	_, err = r.WriteFile(ctx, "b", &failingReader{n: 10}, 0o644, opts)
	if err == nil {
		t.Fatal("a failed source published a file")
	}
	if _, err := os.Lstat(dir + "/b"); !os.IsNotExist(err) {
		t.Fatalf("a failed in-place write left its file: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("directory holds %d entries, want a and link", len(ents))
	}
	_, err = r.WriteFile(ctx, "c", bytes.NewReader(nil), 0o644, WriteOptions{InPlace: true})
	wantCode(t, err, CodeInvalidArgument)
}
