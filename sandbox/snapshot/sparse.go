package snapshot

// Sparse files. A file whose holes are worth it is read region by region (SEEK_DATA/SEEK_HOLE),
// never through its holes, and archived in the PAX GNU sparse format 1.0, as GNU tar writes it
// (`tar --format=pax -S`): an extended header with GNU.sparse.major=1, minor=0, name and
// realsize, then a ustar header whose data is the sparse map (decimal, one number a line,
// padded to 512) followed by the data regions. `zstd -d | tar -x` extracts it as the file it
// was, and archive/tar reads it as a regular file of its logical size, holes as zeros.
//
// Its manifest entry says "sparse" and its digest is not the SHA-256 of its bytes, which would
// cost a pass over every zero of the holes (a 1 TiB file: about 14 minutes of one core): it is
// the SHA-256 of the logical size and of every 4 KiB block that holds a byte other than zero,
// each with its offset (contentHash). That is a function of the content alone, however the
// holes fell, so a reader that sees the file as plain bytes computes it too.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/ctxio"
	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

const (
	// sparseMinHoles is how many bytes of holes make a file worth archiving sparse; below
	// that, the plain format (which every reader knows) costs little.
	sparseMinHoles = 1 << 20
	// sparseMaxRegions bounds the sparse map (held in memory, written before the data): a
	// file fragmented further has its last region stretched over the holes that follow,
	// which are then read (as zeros) and archived.
	sparseMaxRegions = 1 << 16
	// sparseBlock is contentHash's block, and the alignment of archived regions.
	sparseBlock = fsguard.HoleBlock
)

// region is a run of a sparse file's data: off and n bytes.
type region struct{ off, n int64 }

// dataRegions maps the data of the open file f of size bytes (blocks allocated, in 512-byte
// units), aligned out to sparseBlock, or returns nil when the file is not worth archiving sparse
// or the filesystem cannot say where its holes are.
func dataRegions(f *os.File, size, blocks int64) []region {
	if size-blocks*512 < sparseMinHoles {
		return nil // allocated almost in full: no holes worth it
	}
	rs, ok := mapData(f, size)
	if !ok {
		return nil
	}
	var data int64
	for _, r := range rs {
		data += r.n
	}
	if size-data < sparseMinHoles {
		return nil
	}
	return rs
}

// mapData lists where f's data lies (SEEK_DATA/SEEK_HOLE); ok is false when the filesystem
// cannot say.
func mapData(f *os.File, size int64) (rs []region, ok bool) {
	fd := int(f.Fd())
	rs = []region{}
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO || (err == nil && start >= size) {
			break // a hole to the end
		}
		if err != nil {
			return nil, false
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, false
		}
		start = start / sparseBlock * sparseBlock
		end = min(size, (end+sparseBlock-1)/sparseBlock*sparseBlock)
		switch last := len(rs) - 1; {
		case last >= 0 && start <= rs[last].off+rs[last].n:
			rs[last].n = max(rs[last].n, end-rs[last].off)
		case len(rs) == sparseMaxRegions:
			rs[last].n = end - rs[last].off
		default:
			rs = append(rs, region{start, end - start})
		}
		off = max(end, off+1)
	}
	return rs, true
}

// copySparse archives the open regular file f as the sparse entry p with data regions rs.
// It checks what copyFile checks, region by region, and that the holes did not move.
func (c *capturer) copySparse(p string, f *os.File, rd *stableread.Read, rs []region, mt time.Time) error {
	before := rd.Stamp()
	mode := int64(before.Mode & 0o7777)
	if err := c.tw.Flush(); err != nil { // pads the previous entry: the stream is at a block
		return fmt.Errorf("write archive: %w", err)
	}
	phys, err := writeSparseHeader(c.raw, p, mode, mt, before.Size, rs)
	if err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	sum := newContentHash(before.Size)
	settled := rd.Settled()
	var sums [][]byte
	if !settled {
		sums = make([][]byte, 0, len(rs))
	}
	for _, r := range rs {
		sum.skipTo(r.off)
		var rsum hash.Hash
		if !settled {
			rsum = sha256.New()
		}
		for done := int64(0); done < r.n; {
			if err := c.ctx.Err(); err != nil {
				return err
			}
			n, err := f.ReadAt(c.buf[:min(int64(len(c.buf)), r.n-done)], r.off+done)
			if n > 0 {
				sum.Write(c.buf[:n])
				if rsum != nil {
					rsum.Write(c.buf[:n])
				}
				if _, werr := c.raw.Write(c.buf[:n]); werr != nil {
					return fmt.Errorf("write archive: %w", werr)
				}
				done += int64(n)
			}
			if err == io.EOF && done < r.n {
				return newError(CodeChangedDuringCapture, p, fmt.Sprintf("file shrank while it was archived (short read at %d of %d bytes)", r.off+done, before.Size), nil)
			}
			if err != nil && err != io.EOF {
				return fmt.Errorf("read %s: %w", p, err)
			}
		}
		if rsum != nil {
			sums = append(sums, rsum.Sum(nil))
		}
	}
	if pad := (blockPad - phys%blockPad) % blockPad; pad > 0 {
		if _, err := c.raw.Write(make([]byte, pad)); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
	}
	if err := c.checkSparse(p, f, rd, rs, sums); err != nil {
		return err
	}
	c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeFile, Mode: before.Mode & 0o7777, Size: before.Size,
		SHA256: sum.hex(), MTime: mt, Sparse: true})
	return nil
}

// checkSparse is stableread.Check for a file read region by region: a file at rest is judged
// by its stat; otherwise each region is read again and must hash the same, and the data must
// still lie where it did (a write into a hole allocates it).
func (c *capturer) checkSparse(p string, f *os.File, rd *stableread.Read, rs []region, sums [][]byte) error {
	wrap := func(err error) error {
		var ce *stableread.Error
		if errors.As(err, &ce) {
			return newError(CodeChangedDuringCapture, p, "file "+ce.Reason, nil)
		}
		return err
	}
	if sums == nil {
		if err := rd.Check(c.ctx, 0, 0, nil); err != nil {
			return wrap(err)
		}
	}
	for i, r := range rs[:len(sums)] {
		if err := rd.Check(c.ctx, r.off, r.n, sums[i]); err != nil {
			return wrap(err)
		}
	}
	if sums != nil && len(rs) == 0 {
		empty := sha256.Sum256(nil)
		if err := rd.Check(c.ctx, 0, 0, empty[:]); err != nil {
			return wrap(err)
		}
	}
	if again, ok := mapData(f, rd.Stamp().Size); !ok || !sameRegions(rs, again) {
		return newError(CodeChangedDuringCapture, p, "file changed while it was archived (its holes moved)", nil)
	}
	return nil
}

func sameRegions(a, b []region) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// blockPad is the tar block size.
const blockPad = 512

// writeSparseHeader writes, at a block boundary of w, the extended header, the ustar header and
// the sparse map of a GNU sparse 1.0 entry; the caller then writes the regions' data and pads
// it to a block. It returns the entry's physical size (map and data).
func writeSparseHeader(w io.Writer, name string, mode int64, mt time.Time, size int64, rs []region) (int64, error) {
	var m bytes.Buffer
	entries := rs
	if n := len(rs); n == 0 || rs[n-1].off+rs[n-1].n < size {
		// A hole to the end: GNU tar sets the length from a last, empty region.
		entries = append(rs[:n:n], region{size, 0})
	}
	fmt.Fprintf(&m, "%d\n", len(entries))
	var data int64
	for _, r := range entries {
		fmt.Fprintf(&m, "%d\n%d\n", r.off, r.n)
		data += r.n
	}
	if pad := (blockPad - m.Len()%blockPad) % blockPad; pad > 0 {
		m.Write(make([]byte, pad))
	}
	phys := int64(m.Len()) + data

	var x bytes.Buffer
	record := func(k, v string) {
		body := " " + k + "=" + v + "\n"
		n := len(body) + 1
		for n != len(strconv.Itoa(n))+len(body) {
			n = len(strconv.Itoa(n)) + len(body)
		}
		fmt.Fprintf(&x, "%d%s", n, body)
	}
	record("GNU.sparse.major", "1")
	record("GNU.sparse.minor", "0")
	record("GNU.sparse.name", name)
	record("GNU.sparse.realsize", strconv.FormatInt(size, 10))
	record("mtime", paxTime(mt))
	if phys > maxOctal11 {
		record("size", strconv.FormatInt(phys, 10))
	}
	dir, base := path.Split(name)
	xh := ustarHeader(shortName(dir+"PaxHeaders/", base), tar.TypeXHeader, 0o644, int64(x.Len()), mt.Unix())
	if pad := (blockPad - x.Len()%blockPad) % blockPad; pad > 0 {
		x.Write(make([]byte, pad))
	}
	dh := ustarHeader(shortName(dir+"GNUSparseFile.0/", base), tar.TypeReg, mode, phys, mt.Unix())
	for _, b := range [][]byte{xh, x.Bytes(), dh, m.Bytes()} {
		if _, err := w.Write(b); err != nil {
			return 0, err
		}
	}
	return phys, nil
}

// paxTime formats t as a PAX time record does (as archive/tar writes it): seconds, and a
// fraction when there is one.
func paxTime(t time.Time) string {
	sec, nsec := t.Unix(), int64(t.Nanosecond())
	if nsec == 0 {
		return strconv.FormatInt(sec, 10)
	}
	sign := ""
	if sec < 0 {
		sign, sec, nsec = "-", -(sec + 1), 1e9-nsec
	}
	return strings.TrimRight(fmt.Sprintf("%s%d.%09d", sign, sec, nsec), "0")
}

// maxOctal11 is the largest number a ustar size or mtime field holds.
const maxOctal11 = 1<<33 - 1

// shortName is the ustar name of a sparse entry's headers, which readers ignore in favour of
// GNU.sparse.name: cut to the field's 100 bytes.
func shortName(prefix, base string) string {
	s := prefix + base
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// ustarHeader is one ustar header block; a size or mtime too large for its field is left 0,
// the extended header carrying it.
func ustarHeader(name string, flag byte, mode, size, mtime int64) []byte {
	b := make([]byte, blockPad)
	octal := func(field []byte, v int64) {
		if v < 0 || v > maxOctal11 {
			v = 0
		}
		copy(field, fmt.Sprintf("%0*o", len(field)-1, v))
	}
	copy(b[0:100], name)
	octal(b[100:108], mode)
	octal(b[108:116], 0) // uid
	octal(b[116:124], 0) // gid
	octal(b[124:136], size)
	octal(b[136:148], mtime)
	b[156] = flag
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	var chk int64
	for _, c := range b {
		chk += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", chk))
	return b
}

// contentHash is the digest of a sparse entry: SHA-256 over a label, the logical size, and each
// sparseBlock-aligned block that is not all zeros, as its offset then its bytes (the last block
// may be short). Bytes go in in order; skipTo jumps over a hole.
type contentHash struct {
	h       hash.Hash
	size    int64
	off     int64 // offset of pending's first byte
	pending []byte
}

func newContentHash(size int64) *contentHash {
	c := &contentHash{h: sha256.New(), size: size, pending: make([]byte, 0, sparseBlock)}
	c.h.Write([]byte("tether-sparse-sha256-v1\x00"))
	c.h.Write(binary.LittleEndian.AppendUint64(nil, uint64(size)))
	return c
}

// ContentHash is the digest a manifest records for e's bytes: SHA-256, or for a sparse entry
// the digest that skips its zero blocks (see the package's sparse files).
func ContentHash(e Entry) hash.Hash {
	if e.Sparse {
		return newContentHash(e.Size)
	}
	return sha256.New()
}

func (c *contentHash) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(sparseBlock-len(c.pending), len(p))
		c.pending = append(c.pending, p[:k]...)
		p = p[k:]
		if len(c.pending) == sparseBlock {
			c.flush()
		}
	}
	return n, nil
}

// flush hashes the pending block unless it is all zeros, and moves past it.
func (c *contentHash) flush() {
	if !bytes.Equal(c.pending, zeros[:len(c.pending)]) {
		c.h.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.off)))
		c.h.Write(c.pending)
	}
	c.off += int64(len(c.pending))
	c.pending = c.pending[:0]
}

// skipTo moves to off over bytes that are zeros.
func (c *contentHash) skipTo(off int64) {
	if pos := c.off + int64(len(c.pending)); off > pos && len(c.pending) > 0 {
		c.Write(zeros[:min(int64(sparseBlock-len(c.pending)), off-pos)])
	}
	if pos := c.off + int64(len(c.pending)); off > pos {
		whole := (off - pos) / sparseBlock * sparseBlock
		c.off += whole
		c.Write(zeros[:off-pos-whole])
	}
}

func (c *contentHash) Sum(b []byte) []byte {
	h := c.h.(hash.Cloner)
	dup, err := h.Clone()
	if err != nil {
		panic(err) // SHA-256 always clones
	}
	if len(c.pending) > 0 && !bytes.Equal(c.pending, zeros[:len(c.pending)]) {
		dup.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.off)))
		dup.Write(c.pending)
	}
	return dup.Sum(b)
}

func (c *contentHash) hex() string { return hex.EncodeToString(c.Sum(nil)) }

func (c *contentHash) Reset() {
	*c = *newContentHash(c.size)
}

func (c *contentHash) Size() int      { return sha256.Size }
func (c *contentHash) BlockSize() int { return sparseBlock }

// zeros is compared against and hashed from, never written to.
var zeros [sparseBlock]byte

// sparseRegions is dataRegions for a file being read through rd.
func sparseRegions(f *os.File, rd *stableread.Read) []region {
	// os.File.Stat carries a *syscall.Stat_t, the guard's OpenStat a *unix.Stat_t.
	switch st := rd.Info().Sys().(type) {
	case *syscall.Stat_t:
		return dataRegions(f, st.Size, st.Blocks)
	case *unix.Stat_t:
		return dataRegions(f, st.Size, st.Blocks)
	}
	return nil
}

// hashSparse reads the sparse entry e's bytes from r to their end and returns their
// ContentHash digest.
func hashSparse(ctx context.Context, e *Entry, r io.Reader, buf []byte) (string, int64, error) {
	sum := newContentHash(e.Size)
	n, err := io.CopyBuffer(sum, ctxio.Reader{Ctx: ctx, R: r}, buf)
	if err != nil {
		return "", n, err
	}
	return sum.hex(), n, nil
}

// sparseDigest reads the open file f of size bytes again where its data lies and returns its
// ContentHash digest: the fence's second look at a sparse entry, which never reads its holes.
func sparseDigest(ctx context.Context, f *os.File, size int64, buf []byte) (string, error) {
	rs, ok := mapData(f, size)
	if !ok {
		rs = []region{{0, size}}
	}
	sum := newContentHash(size)
	for _, r := range rs {
		sum.skipTo(r.off)
		n, err := io.CopyBuffer(sum, ctxio.Reader{Ctx: ctx, R: io.NewSectionReader(f, r.off, r.n)}, buf)
		if err != nil {
			return "", err
		}
		if n != r.n {
			return "", nil // shrank: no digest matches
		}
	}
	return sum.hex(), nil
}
