package blob

import (
	"os"
	"path/filepath"
	"testing"
)

// A large Put hands its pages to writeback as it streams, so the fsync before the rename has
// little left to write.
func TestWritebackStartsAsDataIsWritten(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &writeback{f: f}
	chunk := make([]byte, 1<<20)
	for range 2*writebackStep/len(chunk) + 1 {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if w.flushed != 2*writebackStep || w.off != 2*writebackStep+int64(len(chunk)) {
		t.Fatalf("wrote %d bytes, handed %d to writeback; want %d", w.off, w.flushed, 2*writebackStep)
	}
}
