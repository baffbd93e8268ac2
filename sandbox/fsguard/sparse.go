package fsguard

import (
	"bytes"
	"io"
	"os"
)

// HoleBlock is the granularity at which a sparse write (WriteOptions.Sparse) leaves zeros out:
// a block of this size, aligned to it in the file, that holds only zeros is skipped with a
// seek, so the filesystem allocates nothing for it.
const HoleBlock = 4096

// zeroBlock is compared against, never written.
var zeroBlock [HoleBlock]byte

// holeWriter writes a file's bytes in order, seeking over every aligned all-zero block instead
// of writing it; finish sets the file's length, which a trailing hole would otherwise leave
// short. Partial blocks are held back until they are complete, so a zero block that arrives in
// pieces is still a hole.
type holeWriter struct {
	f       *os.File
	off     int64 // file offset of the next byte
	pending []byte
	seeked  bool // the descriptor's position is behind off (a hole was skipped)
}

func newHoleWriter(f *os.File) *holeWriter {
	return &holeWriter{f: f, pending: make([]byte, 0, HoleBlock)}
}

func (w *holeWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(w.pending) > 0 || len(p) < HoleBlock {
			k := min(HoleBlock-len(w.pending), len(p))
			w.pending = append(w.pending, p[:k]...)
			p = p[k:]
			if len(w.pending) == HoleBlock {
				if err := w.block(w.pending); err != nil {
					return 0, err
				}
				w.pending = w.pending[:0]
			}
			continue
		}
		// Whole blocks straight from p: a run of data blocks goes out in one write.
		end := HoleBlock
		if !bytes.Equal(p[:HoleBlock], zeroBlock[:]) {
			for end+HoleBlock <= len(p) && !bytes.Equal(p[end:end+HoleBlock], zeroBlock[:]) {
				end += HoleBlock
			}
		}
		if err := w.block(p[:end]); err != nil {
			return 0, err
		}
		p = p[end:]
	}
	return n, nil
}

// block writes b (whole blocks, all data or one zero block) at w.off.
func (w *holeWriter) block(b []byte) error {
	if len(b) == HoleBlock && bytes.Equal(b, zeroBlock[:]) {
		w.off += HoleBlock
		w.seeked = true
		return nil
	}
	if w.seeked {
		if _, err := w.f.Seek(w.off, io.SeekStart); err != nil {
			return err
		}
		w.seeked = false
	}
	if _, err := w.f.Write(b); err != nil {
		return err
	}
	w.off += int64(len(b))
	return nil
}

// finish writes the last partial block, unless it is all zeros, and sets the file's length.
func (w *holeWriter) finish() error {
	if len(w.pending) > 0 {
		tail := w.pending
		if !bytes.Equal(tail, zeroBlock[:len(tail)]) {
			if err := w.block(tail); err != nil {
				return err
			}
		} else {
			w.off += int64(len(tail))
		}
		w.pending = w.pending[:0]
	}
	return w.f.Truncate(w.off)
}
