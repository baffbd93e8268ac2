package snapshot

// Composing an incremental receipt: its tree is spread over layers (the archives of earlier
// captures and its own), every one in the same canonical order, so the entries one receipt takes
// from a layer are a subsequence of that layer's entries. A LayerReader reads one layer once,
// front to back, skipping what the receipt does not take; a Composer writes the plain archive
// (tar+zstd, the manifest last) that a full capture of the same tree would have been, which is
// what restore, export and the saved-copy readers consume.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// LayerReader reads the entries of one layer archive (plain zstd tar) in order.
type LayerReader struct {
	src  *tarstream.Stream
	tr   *tarstream.Reader
	name string
	last string
	done bool
}

// OpenLayer starts reading the layer archive r; name is for errors.
func OpenLayer(r io.Reader, name string) (*LayerReader, error) {
	src, err := tarstream.Decompress(r)
	if err != nil {
		return nil, corrupt("", "layer "+name+": unreadable archive", err)
	}
	return &LayerReader{src: src, tr: tarstream.NewReader(src), name: name}, nil
}

// Close releases the decoder.
func (l *LayerReader) Close() { l.src.Close() }

// File advances to the regular file e (skipping the entries before it) and returns a reader of
// exactly its logical bytes; the caller hashes them against e. A layer that does not hold e where
// the order says it must is corrupt.
func (l *LayerReader) File(e *Entry) (io.Reader, error) {
	for !l.done {
		h, err := l.tr.Next()
		if err != nil {
			l.done = true
			if err == io.EOF {
				break
			}
			return nil, corrupt(e.Path, "layer "+l.name+": unreadable archive", err)
		}
		name := h.Name
		if h.Typeflag == tar.TypeDir {
			name = name[:max(len(name)-1, 0)]
		}
		if name == ManifestName {
			l.done = true
			break
		}
		if l.last != "" && cmpTree(l.last, name) >= 0 {
			return nil, corrupt(name, "layer "+l.name+": entries out of order", nil)
		}
		l.last = name
		switch c := cmpTree(name, e.Path); {
		case c < 0:
			continue
		case c > 0:
			l.done = true
		default:
			if h.Typeflag != tar.TypeReg || h.Size != e.Size || tarstream.IsSparse(h) != e.Sparse {
				return nil, corrupt(e.Path, "layer "+l.name+": the entry is not the file the manifest names", nil)
			}
			return io.LimitReader(l.tr, e.Size), nil
		}
	}
	return nil, corrupt(e.Path, "layer "+l.name+" does not hold the file", nil)
}

// Composer writes a plain snapshot archive entry by entry.
type Composer struct {
	ctx  context.Context
	enc  *zstd.Encoder
	tw   *tar.Writer
	w    io.Writer // what tw writes to (sparse entries are written there)
	buf  []byte
	tree *entryDigest
	all  Totals
}

// NewComposer writes to w with the capture's encoder settings, one encoder goroutine.
func NewComposer(ctx context.Context, w io.Writer) (*Composer, error) {
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(zstdWindow))
	if err != nil {
		return nil, err
	}
	return &Composer{ctx: ctx, enc: enc, tw: tar.NewWriter(enc), w: enc, buf: make([]byte, copyBufSize), tree: newEntryDigest()}, nil
}

func (c *Composer) header(h *tar.Header, e *Entry) error {
	h.Name, h.Mode, h.ModTime, h.Format = e.Path, int64(e.Mode), e.MTime, tar.FormatPAX
	if err := c.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}

// Add writes e. A file's bytes come from data (exactly e.Size logical bytes, checked against
// its SHA-256); a sparse file's are read twice, the first time (scan) to find its data regions.
func (c *Composer) Add(e Entry, data func() (io.Reader, error), scan func() (io.Reader, error)) error {
	e.Ref = false
	if err := c.tree.add(&e); err != nil {
		return err
	}
	c.all.add(&e)
	switch e.Type {
	case TypeDir:
		return c.header(&tar.Header{Name: e.Path + "/", Typeflag: tar.TypeDir}, &e)
	case TypeSymlink:
		return c.header(&tar.Header{Typeflag: tar.TypeSymlink, Linkname: e.LinkTarget}, &e)
	case TypeFile:
	default:
		return corrupt(e.Path, "unknown entry type "+e.Type, nil)
	}
	if e.Sparse {
		return c.sparse(&e, data, scan)
	}
	r, err := data()
	if err != nil {
		return err
	}
	if err := c.header(&tar.Header{Typeflag: tar.TypeReg, Size: e.Size}, &e); err != nil {
		return err
	}
	h := ContentHash(e)
	n, err := io.CopyBuffer(io.MultiWriter(c.tw, h), r, c.buf)
	if err != nil {
		return err
	}
	return checkBytes(&e, n, h.Sum(nil))
}

func checkBytes(e *Entry, n int64, sum []byte) error {
	if n != e.Size || fmt.Sprintf("%x", sum) != e.SHA256 {
		return corrupt(e.Path, "a layer's bytes for the file differ from the manifest's SHA-256", nil)
	}
	return nil
}

// sparse writes e as a GNU sparse entry whose regions are its non-zero blocks (the content
// digest skips zero blocks whatever the regions, so it is the manifest's).
func (c *Composer) sparse(e *Entry, data, scan func() (io.Reader, error)) error {
	r, err := scan()
	if err != nil {
		return err
	}
	var rs []region
	blk := make([]byte, sparseBlock)
	for off := int64(0); off < e.Size; off += sparseBlock {
		n, err := io.ReadFull(r, blk[:min(sparseBlock, e.Size-off)])
		if err != nil {
			return corrupt(e.Path, "a layer's sparse file is short", err)
		}
		if !bytes.Equal(blk[:n], make([]byte, n)) {
			if k := len(rs) - 1; k >= 0 && rs[k].off+rs[k].n == off {
				rs[k].n += int64(n)
			} else {
				rs = append(rs, region{off, int64(n)})
			}
		}
	}
	if r, err = data(); err != nil {
		return err
	}
	if err := c.tw.Flush(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	phys, err := writeSparseHeader(c.w, e.Path, int64(e.Mode), e.MTime, e.Size, rs)
	if err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	h := newContentHash(e.Size)
	var at int64
	for _, rg := range rs {
		if _, err := io.CopyN(io.Discard, r, rg.off-at); err != nil {
			return corrupt(e.Path, "a layer's sparse file is short", err)
		}
		h.skipTo(rg.off)
		if _, err := io.CopyBuffer(io.MultiWriter(c.w, h), io.LimitReader(r, rg.n), c.buf); err != nil {
			return err
		}
		at = rg.off + rg.n
	}
	if pad := (blockPad - phys%blockPad) % blockPad; pad > 0 {
		if _, err := c.w.Write(make([]byte, pad)); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
	}
	if fmt.Sprintf("%x", h.Sum(nil)) != e.SHA256 {
		return corrupt(e.Path, "a layer's bytes for the sparse file differ from the manifest's SHA-256", nil)
	}
	return nil
}

// Tree is the digest of the entries added so far, as TreeDigest gives it; Totals their totals.
func (c *Composer) Tree() (string, Totals) { return c.tree.sum(), c.all }

// Finish writes the manifest (its JSON as given, of size bytes, from r) and closes the archive.
func (c *Composer) Finish(r io.Reader, size int64, created time.Time) error {
	if err := c.tw.WriteHeader(&tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Mode: 0o644, Size: size,
		ModTime: created, Format: tar.FormatPAX}); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	if n, err := io.Copy(c.tw, r); err != nil || n != size {
		return fmt.Errorf("write manifest: %d of %d bytes: %v", n, size, err)
	}
	if err := c.tw.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return c.enc.Close()
}

// Abort stops the encoder.
func (c *Composer) Abort() {
	c.enc.Reset(io.Discard)
	c.enc.Close()
}

// CmpTree compares two canonical paths in archive order (see cmpTree).
func CmpTree(a, b string) int { return cmpTree(a, b) }
