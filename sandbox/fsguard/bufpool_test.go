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
	// A GC may empty the pool now and then; one fresh buffer per write would be 50 MiB.
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > CopyBufSize/4 {
		t.Fatalf("each small write allocated %d bytes on average; want the copy buffer reused (< %d)", per, CopyBufSize/4)
	}
}

// A large write hands its pages to writeback as it goes, so its final fsync has little left.
func TestWritebackStartsAsDataIsWritten(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/big")
	must(t, err)
	defer f.Close()
	w := &writeback{f: f}
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
