package fsguard

import (
	"os"

	"golang.org/x/sys/unix"
)

// CopyBufSize is the size of the buffers a root lends to its copies.
const CopyBufSize = 256 << 10

// bufPool lends copy buffers. A restore writes tens of thousands of files through one root; a
// fresh 256 KiB buffer for each cost more CPU in zeroing and garbage collection than the copy
// itself. The pool belongs to a root and is shared with the roots opened beneath it, so there
// is no package state. It is a bounded free list rather than a sync.Pool: it keeps at most
// poolBuffers idle (1 MiB, whatever the garbage collector does), and a sync.Pool under the race
// detector drops a quarter of what is put back on purpose, so reuse could not be tested there.
type bufPool struct{ free chan *[]byte }

// poolBuffers bounds the idle buffers a pool keeps: copies through one root at once (restore
// writes one file at a time; a few concurrent puts and reads).
const poolBuffers = 4

func newBufPool() *bufPool {
	return &bufPool{free: make(chan *[]byte, poolBuffers)}
}

func (b *bufPool) get() *[]byte {
	select {
	case p := <-b.free:
		return p
	default:
		buf := make([]byte, CopyBufSize)
		return &buf
	}
}

func (b *bufPool) put(p *[]byte) {
	select {
	case b.free <- p:
	default: // enough idle already: this one goes to the garbage collector
	}
}

// writebackStep is how much a writeback lets accumulate before it starts the kernel writing.
const writebackStep = 8 << 20

// Writeback writes to F and, every writebackStep bytes, asks the kernel to start writing those
// pages out (sync_file_range WRITE, which does not wait). The final fsync (or the restore's
// syncfs) then finds little left to write instead of the whole file, so a large write overlaps
// its disk work with the copy, and the dirty pages it holds stay bounded.
type Writeback struct {
	F       *os.File
	off     int64 // bytes written
	flushed int64 // bytes handed to writeback
}

func (w *Writeback) Write(p []byte) (int, error) {
	n, err := w.F.Write(p)
	w.off += int64(n)
	if w.off-w.flushed >= writebackStep {
		// Advice only: a filesystem without it still gets the final sync.
		_ = unix.SyncFileRange(int(w.F.Fd()), w.flushed, w.off-w.flushed, unix.SYNC_FILE_RANGE_WRITE)
		w.flushed = w.off
	}
	return n, err
}
