package fsguard

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Large files are written with O_DIRECT where the filesystem takes it. A buffered write copies
// every byte into the page cache and then writes it back; on this project's 2-vCPU VMs that copy
// was the controller's largest cost in a capture (1.9 of its ~5 CPU-s for a 1 GiB tree, more than
// verifying every entry). A direct write hands the disk the buffer itself, and the fsync after it
// has only the tail and the metadata left.
const (
	directAlign = 4096    // the largest logical block size O_DIRECT asks alignment to
	directChunk = 1 << 20 // the unit written; two are held, one filling while one is written
)

// DirectWriter writes to F through the page cache (as Writeback) for its first After bytes, then
// turns O_DIRECT on and writes through two page-aligned chunks: Write fills one while a routine
// writes the other, so the disk works while the stream goes on. A filesystem without O_DIRECT
// (tmpfs) keeps the buffered path. F must be positioned at 0 and written only through the
// DirectWriter; After must be a multiple of 4096. Finish writes what is left and must be called
// once, whatever happened before, to end the routine and free the chunks.
type DirectWriter struct {
	F     *os.File
	After int64 // bytes written buffered first; small files never reach O_DIRECT

	buffered Writeback
	off      int64
	direct   bool
	refused  bool          // the filesystem said no: buffered to the end
	mem      []byte        // both chunks, mapped so they are page-aligned and outside the Go heap
	cur      []byte        // the chunk being filled
	n        int           // bytes in cur
	full     chan []byte   // chunks to write
	free     chan []byte   // chunks written (or skipped after a failure)
	errc     chan error    // the routine's first write error
	ended    chan struct{} // closed when the routine returns
	failed   error
	finished bool
}

func (w *DirectWriter) Write(p []byte) (int, error) {
	if w.failed != nil {
		return 0, w.failed
	}
	if w.finished {
		return 0, errors.New("direct writer: write after Finish")
	}
	written := 0
	if !w.direct {
		if w.refused || w.off+int64(len(p)) < w.After {
			return w.writeBuffered(p)
		}
		n, err := w.writeBuffered(p[:w.After-w.off])
		if err != nil {
			return n, err
		}
		written, p = n, p[n:]
		if err := w.turnDirect(); err != nil {
			w.failed = err
			return written, err
		}
		if !w.direct {
			n, err := w.writeBuffered(p)
			return written + n, err
		}
	}
	for {
		c := copy(w.cur[w.n:], p)
		w.n += c
		written += c
		p = p[c:]
		if w.n < len(w.cur) {
			return written, nil
		}
		w.full <- w.cur
		w.cur, w.n = <-w.free, 0
		select {
		case err := <-w.errc:
			w.failed = err
			return written, err
		default:
		}
		if len(p) == 0 {
			return written, nil
		}
	}
}

func (w *DirectWriter) writeBuffered(p []byte) (int, error) {
	if w.buffered.F == nil {
		w.buffered.F = w.F
	}
	n, err := w.buffered.Write(p)
	w.off += int64(n)
	if err != nil {
		w.failed = err
	}
	return n, err
}

// turnDirect sets O_DIRECT on F and starts the routine; a filesystem that refuses the flag
// leaves the writer buffered.
func (w *DirectWriter) turnDirect() error {
	if w.off%directAlign != 0 {
		return fmt.Errorf("direct write from offset %d: not a multiple of %d", w.off, directAlign)
	}
	if err := setDirect(w.F, true); err != nil {
		if errors.Is(err, unix.EINVAL) {
			w.refused = true
			return nil
		}
		return err
	}
	mem, err := unix.Mmap(-1, 0, 2*directChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		_ = setDirect(w.F, false)
		return fmt.Errorf("map write buffers: %w", err)
	}
	w.direct, w.mem, w.cur = true, mem, mem[:directChunk:directChunk]
	w.full, w.free = make(chan []byte, 1), make(chan []byte, 2)
	w.errc, w.ended = make(chan error, 1), make(chan struct{})
	w.free <- mem[directChunk:]
	go func() {
		defer close(w.ended)
		var failed, buffered bool
		for chunk := range w.full {
			if !failed {
				n, err := w.F.Write(chunk)
				if errors.Is(err, unix.EINVAL) && n == 0 && !buffered {
					// The flag was taken but the write refused (a device whose blocks are
					// larger than 4 KiB, some FUSE filesystems): the rest goes buffered.
					buffered = true
					if err = setDirect(w.F, false); err == nil {
						_, err = w.F.Write(chunk)
					}
				}
				if err != nil {
					failed = true
					w.errc <- err
				}
			}
			w.free <- chunk // always returned, so Write never waits on a routine that failed
		}
	}()
	return nil
}

// ReadFrom reads straight into the chunks once direct, saving io.Copy's copy through a buffer
// of its own.
func (w *DirectWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	var buf []byte
	for !w.direct {
		if w.failed != nil {
			return total, w.failed
		}
		if buf == nil {
			buf = make([]byte, 256<<10)
		}
		buf := buf
		if !w.refused {
			buf = buf[:min(int64(len(buf)), max(w.After-w.off, 1))]
		}
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total + int64(n), werr
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
	for {
		if w.failed != nil {
			return total, w.failed
		}
		if w.n == len(w.cur) {
			if _, err := w.Write(nil); err != nil {
				return total, err
			}
		}
		n, err := r.Read(w.cur[w.n:])
		w.n += n
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Finish writes what the writer holds, waits for its routine and frees its chunks. The caller
// still fsyncs. A second Finish does nothing more.
func (w *DirectWriter) Finish() (err error) {
	if w.finished {
		return w.failed
	}
	w.finished = true
	if !w.direct {
		return w.failed
	}
	close(w.full)
	<-w.ended
	defer func() {
		if uerr := unix.Munmap(w.mem); uerr != nil && err == nil {
			err = fmt.Errorf("unmap write buffers: %w", uerr)
		}
	}()
	if w.failed == nil {
		select {
		case w.failed = <-w.errc:
		default:
		}
	}
	if w.failed != nil {
		return w.failed
	}
	// O_DIRECT takes only whole blocks, whose size this writer does not know: the last chunk,
	// at most 1 MiB, goes through the page cache, and so does anything written to F later.
	if err := setDirect(w.F, false); err != nil {
		return err
	}
	if w.n > 0 {
		if _, err := w.F.Write(w.cur[:w.n]); err != nil {
			return err
		}
	}
	return nil
}

// setDirect turns O_DIRECT on or off for f.
func setDirect(f *os.File, on bool) error {
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("read file flags: %w", err)
	}
	if on {
		flags |= unix.O_DIRECT
	} else {
		flags &^= unix.O_DIRECT
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, flags); err != nil {
		return fmt.Errorf("set O_DIRECT %v: %w", on, err)
	}
	return nil
}

// DirectAfter is where WriteFile (and the blob store) turn to O_DIRECT: most files end before
// it and never pay for the switch (a mapping, a routine, the fcntls).
const DirectAfter = 8 << 20
