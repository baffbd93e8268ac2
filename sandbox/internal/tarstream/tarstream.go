// Package tarstream reads tar archives, plain or zstd-compressed, as they
// arrive from an untrusted peer: it bounds the zstd decoder's memory and
// tells a whole archive from one cut short at an entry boundary.
package tarstream

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// ZstdMagic opens every zstd frame.
var ZstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// MaxZstdWindow bounds the decoder's memory for hostile input; it matches
// the zstd command line's default decompression limit.
const MaxZstdWindow = 128 << 20

// ErrZstd marks errors of the zstd layer (a corrupt frame, a window larger
// than MaxZstdWindow) so that callers can type them.
type ErrZstd struct{ Err error }

func (e *ErrZstd) Error() string { return "zstd: " + e.Err.Error() }
func (e *ErrZstd) Unwrap() error { return e.Err }

// Stream is a decompressed archive stream.
type Stream struct {
	io.Reader
	close func()
}

// Decompress sniffs the zstd magic and wraps the stream accordingly.
// Finish or Close must be called once the archive has been read.
func Decompress(r io.Reader) (*Stream, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(len(ZstdMagic))
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read archive: %w", err)
	}
	if !bytes.Equal(head, ZstdMagic) {
		return &Stream{Reader: br, close: func() {}}, nil
	}
	dec, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(MaxZstdWindow), zstd.WithDecoderMaxMemory(MaxZstdWindow))
	if err != nil {
		return nil, &ErrZstd{err}
	}
	return &Stream{Reader: zstdReader{dec}, close: dec.Close}, nil
}

// ErrTrailing is returned by Finish when more than the allowed number of
// bytes follow the archive's end.
var ErrTrailing = errors.New("read archive: data after the end of the archive")

// Finish reads what follows the tar end marker to the end of the input,
// so that a truncated or corrupt zstd frame, or trailing bytes a wire
// body uses to verify itself, fail or pass before anything is published.
// maxTrailing, when not negative, bounds the (decompressed) bytes allowed
// there. It stops early when ctx ends, and releases the decoder.
func (s *Stream) Finish(ctx context.Context, maxTrailing int64) error {
	defer s.Close()
	buf := make([]byte, 32<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := s.Read(buf)
		n += int64(m)
		if maxTrailing >= 0 && n > maxTrailing {
			return ErrTrailing
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var z *ErrZstd
			if errors.As(err, &z) {
				return err
			}
			return fmt.Errorf("read archive: %w", err)
		}
	}
}

// Close releases the decoder without reading further.
func (s *Stream) Close() {
	if s.close != nil {
		s.close()
		s.close = nil
	}
}

// BlockSize is the tar block size.
const BlockSize = 512

// Reader is a tar reader that insists on the end-of-archive marker:
// archive/tar reports a stream that simply stops between entries as a clean
// end, and only the two zero blocks tell a whole archive from one cut at an
// entry boundary. Global PAX headers are skipped.
type Reader struct {
	tr       *tar.Reader
	counted  *CountingReader
	entryEnd int64 // stream offset where the last entry's data ends
}

// NewReader reads a tar stream (already decompressed) from r.
func NewReader(r io.Reader) *Reader {
	c := &CountingReader{R: r}
	return &Reader{tr: tar.NewReader(c), counted: c}
}

// Next advances to the next entry; io.EOF means the archive ended with its
// end marker, io.ErrUnexpectedEOF (wrapped) that it was cut short.
func (r *Reader) Next() (*tar.Header, error) {
	for {
		h, err := r.tr.Next()
		if err == io.EOF {
			if r.counted.N < r.entryEnd+2*BlockSize {
				return nil, fmt.Errorf("read archive: no end-of-archive marker: %w", io.ErrUnexpectedEOF)
			}
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		r.entryEnd = r.counted.N + PaddedSize(h)
		if IsSparse(h) {
			// archive/tar gives a sparse entry's logical size and keeps its physical size
			// (map and data) to itself: the end of its header is all that is known.
			r.entryEnd = r.counted.N
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		return h, nil
	}
}

// Read reads the current entry's data.
func (r *Reader) Read(p []byte) (int, error) { return r.tr.Read(p) }

// PaddedSize is how many bytes of data archive/tar consumes after h's
// header blocks.
func PaddedSize(h *tar.Header) int64 {
	switch h.Typeflag {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo, tar.TypeXGlobalHeader:
		return 0 // header-only types: archive/tar ignores their size field
	}
	return (h.Size + BlockSize - 1) / BlockSize * BlockSize
}

// IsSparse says whether archive/tar read h from a GNU sparse entry (PAX formats 0.x and 1.0):
// its data then reads as the file's logical bytes, holes as zeros.
func IsSparse(h *tar.Header) bool {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// CountingReader counts the bytes read through it.
type CountingReader struct {
	R io.Reader
	N int64
}

func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// zstdReader types the decoder's errors.
type zstdReader struct{ d *zstd.Decoder }

func (z zstdReader) Read(p []byte) (int, error) {
	n, err := z.d.Read(p)
	if err != nil && err != io.EOF {
		err = &ErrZstd{err}
	}
	return n, err
}
