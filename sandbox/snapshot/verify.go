package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"path"
	"time"

	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// Defaults of VerifyOptions' zero values.
const (
	DefaultMaxEntries       = 10_000_000
	DefaultMaxManifestBytes = maxManifestSize // 512 MiB
	DefaultMaxBytes         = 1 << 40         // 1 TiB of file content
)

// VerifyOptions bounds Verify. Zero values mean the defaults
// (DefaultMaxEntries, DefaultMaxManifestBytes, DefaultMaxBytes); whatever
// the options, the manifest may not exceed manifestBytesPerItem (10 KiB)
// per allowed entry, and no single JSON value in it (an entry, the git
// state) may exceed maxManifestValue (128 KiB). Negative values are
// invalid.
type VerifyOptions struct {
	MaxEntries       int   // entries in the archive and the manifest
	MaxManifestBytes int64 // the manifest entry's size
	MaxBytes         int64 // sum of file content sizes
	// OnEntry, when set, sees each verified archive entry in archive order (its SHA256 set for files), before the manifest is read; an error from it stops Verify with that error.
	OnEntry func(Entry) error
	// AllowRefs accepts ref entries in the manifest (an incremental capture): the archive then
	// holds exactly the manifest's other entries, and the limits, the order and the totals
	// apply to the whole tree. Without it a ref is corrupt.
	AllowRefs bool
	// OnManifestEntry, when set, sees each entry of the manifest in order, refs included, as it
	// is decoded (its MTime as archived); an error from it stops Verify with that error.
	OnManifestEntry func(Entry) error
}

// Verified is what Verify proved about an archive: every field was computed from the bytes, not copied from a claim.
type Verified struct {
	WorkspaceID string
	Epoch       uint64
	Parent      string
	ToolVersion string
	CreatedAt   time.Time
	Totals      Totals
	Skipped     int
	Git         json.RawMessage // the manifest's "git" value as archived, nil when absent
	GitError    string
	// ManifestSHA256 is the SHA-256 of the manifest entry's bytes (lowercase hex).
	ManifestSHA256 string
	ManifestSize   int64
	// TreeSHA256 is the SHA-256 of json.Marshal(manifest.Entries), exactly as runner/snapshot.go
	// summarize computes protocol.SnapshotSummary.Tree.
	TreeSHA256 string
}

// Verify reads a plain (zstd, not encrypted) snapshot archive to its end and checks it with
// memory independent of the number of entries: every entry as Restore checks it (canonical
// and unreserved names, types, modes, limits), every file's content hashed, and the manifest
// (the last entry, of a version this build reads) against the entries, bytes and hashes
// actually archived.
//
// Nothing is kept per entry. Entries must come in the order Capture writes them: the tree in
// preorder, each directory's children sorted by name (so "a/b" comes before "a-c"); then a
// duplicate, a missing parent or an entry under a symlink shows against the chain of
// directories from the root to the current entry alone. The archive's entries and the
// manifest's are each folded into a running SHA-256 of their JSON; equal digests, counts and
// totals mean they match. The manifest is decoded as a stream, one entry at a time.
//
// A failure is an *Error: corrupt for an archive that is malformed or does not match its
// manifest, too_large past a limit, unsupported for another manifest version, path_escape or
// symlink_refused for an entry that would leave the tree; the reader's own errors, the
// context's and OnEntry's are returned as they are.
func Verify(ctx context.Context, r io.Reader, opts VerifyOptions) (*Verified, error) {
	if opts.MaxEntries < 0 || opts.MaxManifestBytes < 0 || opts.MaxBytes < 0 {
		return nil, newError(CodeInvalidArgument, "", "negative limit", nil)
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxManifestBytes == 0 {
		opts.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	opts.MaxManifestBytes = min(opts.MaxManifestBytes, int64(opts.MaxEntries+1)*manifestBytesPerItem)
	v := &verifier{
		s:       scanner{ctx: ctx},
		opts:    opts,
		order:   treeOrder{levels: []treeLevel{{dir: "."}}},
		entries: newEntryDigest(),
		buf:     make([]byte, copyBufSize),
	}
	v.s.raw = &errRecorder{r: r}
	src, err := tarstream.Decompress(v.s.raw)
	if err != nil {
		return nil, v.s.streamErr(err)
	}
	defer src.Close()
	if err := v.entriesFrom(tarstream.NewReader(src)); err != nil {
		return nil, err
	}
	if err := src.Finish(ctx, maxTrailing); err != nil {
		return nil, v.s.streamErr(err)
	}
	if v.out == nil {
		return nil, corrupt(ManifestName, "the archive has no manifest as its last entry", nil)
	}
	return v.out, nil
}

// verifier holds one Verify's state: the scanner only for its context and stream typing.
type verifier struct {
	s       scanner
	opts    VerifyOptions
	order   treeOrder
	totals  Totals
	entries *entryDigest // the archive's entries
	buf     []byte
	out     *Verified // set once the manifest matched
}

func (v *verifier) entriesFrom(tr *tarstream.Reader) error {
	for {
		if err := v.s.ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return v.s.streamErr(err)
		}
		if v.out != nil {
			return corrupt(h.Name, "entry after the manifest", nil)
		}
		if h.Name == ManifestName && h.Typeflag == tar.TypeReg {
			if v.out, err = v.manifest(h, tr); err != nil {
				return err
			}
			continue
		}
		e, err := v.check(h)
		if err != nil {
			return err
		}
		if e.Type == TypeFile {
			rec := &errRecorder{r: tr}
			var n int64
			e.SHA256, n, err = hashSink{ctx: v.s.ctx, buf: v.buf}.file(&e, rec)
			switch {
			case err != nil && rec.err != nil:
				return v.s.streamErr(rec.err)
			case err != nil:
				return err
			case n != e.Size:
				return corrupt(e.Path, fmt.Sprintf("entry holds %d bytes, header says %d", n, e.Size), nil)
			}
		}
		if err := v.entries.add(&e); err != nil {
			return err
		}
		if v.opts.OnEntry != nil {
			if err := v.opts.OnEntry(e); err != nil {
				return err
			}
		}
	}
}

// check validates one header as scanner.check does, with the tree order standing in for the
// scanner's map of every path seen.
func (v *verifier) check(h *tar.Header) (Entry, error) {
	name, err := entryName(h)
	if err != nil {
		return Entry{}, err
	}
	typ := TypeFile
	switch h.Typeflag {
	case tar.TypeDir:
		typ = TypeDir
	case tar.TypeSymlink:
		typ = TypeSymlink
	}
	if err := v.order.add(name, typ); err != nil {
		return Entry{}, err
	}
	e, err := headerEntry(h, name)
	if err != nil {
		return Entry{}, err
	}
	if err := checkLimits(name, v.totals.Entries+1, v.totals.Bytes+e.Size, v.opts.MaxEntries, v.opts.MaxBytes); err != nil {
		return Entry{}, err
	}
	v.totals.add(&e)
	return e, nil
}

// add counts one entry.
func (t *Totals) add(e *Entry) {
	t.Entries++
	switch e.Type {
	case TypeFile:
		t.Files++
		t.Bytes += e.Size
	case TypeDir:
		t.Dirs++
	case TypeSymlink:
		t.Symlinks++
	}
}

// treeOrder checks that entries come in Capture's order, keeping only the chain of directories
// from the root to the latest entry and, for each, the name of its latest child.
type treeOrder struct{ levels []treeLevel }

type treeLevel struct {
	dir      string // the directory's path, "." for the root
	last     string // the name of its latest child, "" before the first
	lastType string
}

func (o *treeOrder) add(p, typ string) error {
	parent, name := path.Dir(p), path.Base(p)
	i := len(o.levels) - 1
	for i >= 0 && o.levels[i].dir != parent {
		i--
	}
	if i < 0 {
		// The parent is no directory on the chain: say what it was when it is the latest
		// child of one.
		for _, l := range o.levels {
			if l.last != "" && join(l.dir, l.last) == parent {
				if l.lastType == TypeSymlink {
					return newError(CodeSymlinkRefused, p, "entry would pass through the symlink "+parent, nil)
				}
				if l.lastType != TypeDir {
					return corrupt(p, "parent "+parent+" is not a directory", nil)
				}
			}
		}
		return corrupt(p, "parent directory "+parent+" is not archived before the entry, or the entries are not in tree order", nil)
	}
	o.levels = o.levels[:i+1]
	l := &o.levels[i]
	switch {
	case name == l.last:
		return corrupt(p, "duplicate entry", nil)
	case name < l.last:
		return corrupt(p, "entry out of order: it comes after "+join(l.dir, l.last), nil)
	}
	l.last, l.lastType = name, typ
	if typ == TypeDir {
		o.levels = append(o.levels, treeLevel{dir: p})
	}
	return nil
}

// entryDigest folds a list of entries into a running SHA-256 of their JSON, framed as
// json.Marshal frames a slice, so that two lists match when their digests and counts do.
type entryDigest struct {
	h hash.Hash
	n int
}

func newEntryDigest() *entryDigest {
	d := &entryDigest{h: sha256.New()}
	d.h.Write([]byte("["))
	return d
}

func (d *entryDigest) add(e *Entry) error {
	js, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode entry %s: %w", e.Path, err)
	}
	d.write(js)
	return nil
}

func (d *entryDigest) write(js []byte) {
	if d.n > 0 {
		d.h.Write([]byte(","))
	}
	d.h.Write(js)
	d.n++
}

// sum closes the list and returns its digest.
func (d *entryDigest) sum() string {
	d.h.Write([]byte("]"))
	return hex.EncodeToString(d.h.Sum(nil))
}
