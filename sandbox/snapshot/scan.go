package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// Manifest size limits: the manifest is read into memory whole.
const (
	// maxTrailing bounds the bytes allowed after the tar end marker
	// (padding to a tar record size, 10 KiB for GNU tar).
	maxTrailing          = 1 << 20
	maxManifestSize      = 512 << 20
	manifestBytesPerItem = 10 << 10 // a 4 KiB path, a 4 KiB link target and the rest
)

// sink materializes checked entries (Restore) or only hashes them
// (ReadManifest).
type sink interface {
	dir(e *Entry) error
	// file consumes exactly e.Size bytes of r and returns their SHA-256.
	file(e *Entry, r io.Reader) (sha string, n int64, err error)
	symlink(e *Entry) error
}

// scanner reads a snapshot archive, checks each entry as it comes (names,
// types, duplicates, parents, limits), hands it to a sink, and at the end
// verifies the whole list against the manifest, which must be the last
// entry.
type scanner struct {
	ctx        context.Context
	maxEntries int
	maxBytes   int64
	entries    []Entry
	kinds      map[string]string
	bytes      int64
	m          *Manifest
	raw        *errRecorder // the caller's reader
}

func newScanner(ctx context.Context, maxEntries int, maxBytes int64) *scanner {
	return &scanner{ctx: ctx, maxEntries: maxEntries, maxBytes: maxBytes, kinds: map[string]string{}}
}

func corrupt(p, msg string, err error) *Error { return newError(CodeCorrupt, p, msg, err) }

// run reads r to its end and returns the verified manifest.
func (s *scanner) run(r io.Reader, out sink) (*Manifest, error) {
	s.raw = &errRecorder{r: r}
	src, err := tarstream.Decompress(s.raw)
	if err != nil {
		return nil, s.streamErr(err)
	}
	defer src.Close()
	if err := s.entriesFrom(tarstream.NewReader(src), out); err != nil {
		return nil, err
	}
	if err := src.Finish(s.ctx, maxTrailing); err != nil {
		return nil, s.streamErr(err)
	}
	if err := s.verify(); err != nil {
		return nil, err
	}
	return s.m, nil
}

// streamErr types a failure of the stream: an error of the underlying
// reader (a cut connection, a failed body check) is passed on as it is;
// anything else wrong with the zstd or tar data is the archive's fault.
func (s *scanner) streamErr(err error) error {
	var e *Error
	if errors.As(err, &e) || s.raw.err != nil || errors.Is(err, s.ctx.Err()) {
		return err
	}
	return corrupt("", "unreadable archive", err)
}

func (s *scanner) entriesFrom(tr *tarstream.Reader, out sink) error {
	for {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return s.streamErr(err)
		}
		if s.m != nil {
			return corrupt(h.Name, "entry after the manifest", nil)
		}
		if h.Name == ManifestName && h.Typeflag == tar.TypeReg {
			if err := s.readManifest(h, tr); err != nil {
				return err
			}
			continue
		}
		e, err := s.check(h)
		if err != nil {
			return err
		}
		switch e.Type {
		case TypeDir:
			err = out.dir(&e)
		case TypeSymlink:
			err = out.symlink(&e)
		case TypeFile:
			rec := &errRecorder{r: tr}
			var n int64
			e.SHA256, n, err = out.file(&e, rec)
			if err != nil && rec.err != nil {
				err = s.streamErr(rec.err)
			} else if err == nil && n != e.Size {
				err = corrupt(e.Path, fmt.Sprintf("entry holds %d bytes, header says %d", n, e.Size), nil)
			}
		}
		if err != nil {
			return err
		}
		s.kinds[e.Path] = e.Type
		s.entries = append(s.entries, e)
	}
}

// check validates one header against what came before it and the limits.
func (s *scanner) check(h *tar.Header) (Entry, error) {
	name, err := entryName(h)
	if err != nil {
		return Entry{}, err
	}
	if _, dup := s.kinds[name]; dup {
		return Entry{}, corrupt(name, "duplicate entry", nil)
	}
	if parent := path.Dir(name); parent != "." {
		switch s.kinds[parent] {
		case TypeDir:
		case TypeSymlink:
			return Entry{}, newError(CodeSymlinkRefused, name, "entry would pass through the symlink "+parent, nil)
		default:
			return Entry{}, corrupt(name, "parent directory "+parent+" is not archived before the entry", nil)
		}
	}
	e, err := headerEntry(h, name)
	if err != nil {
		return Entry{}, err
	}
	if err := checkLimits(name, len(s.entries)+1, s.bytes+e.Size, s.maxEntries, s.maxBytes); err != nil {
		return Entry{}, err
	}
	s.bytes += e.Size
	return e, nil
}

// entryName checks that a header's name is a canonical, relative path
// other than the manifest's, and returns it (without a directory's
// trailing slash). Names like Tether's temporary ones are the agent's
// files when archived (see reservedEntry).
func entryName(h *tar.Header) (string, error) {
	name := h.Name
	if h.Typeflag == tar.TypeDir {
		name = strings.TrimSuffix(name, "/")
	}
	clean, err := fsguard.Clean(name)
	if err != nil {
		if fsguard.CodeOf(err) == fsguard.CodePathEscape {
			return "", newError(CodePathEscape, name, "entry name leaves the archive's tree", err)
		}
		return "", corrupt(name, "invalid entry name", err)
	}
	if clean != name || clean == "." {
		return "", corrupt(name, "entry name is not in canonical form", nil)
	}
	if name == ManifestName {
		return "", corrupt(name, "an entry other than the manifest has the manifest's name", nil)
	}
	return name, nil
}

// headerEntry checks a header's mode and type and describes it as an
// Entry (without the SHA-256 of a file, which only its content gives).
func headerEntry(h *tar.Header, name string) (Entry, error) {
	if h.Mode < 0 || h.Mode&^0o7777 != 0 {
		return Entry{}, corrupt(name, fmt.Sprintf("invalid mode %o", h.Mode), nil)
	}
	e := Entry{Path: name, Mode: uint32(h.Mode), MTime: h.ModTime.UTC()}
	switch h.Typeflag {
	case tar.TypeDir:
		e.Type = TypeDir
	case tar.TypeReg:
		e.Type, e.Size, e.Sparse = TypeFile, h.Size, tarstream.IsSparse(h)
		if h.Size < 0 {
			return Entry{}, corrupt(name, "negative size", nil)
		}
	case tar.TypeSymlink:
		e.Type, e.LinkTarget = TypeSymlink, h.Linkname
		if h.Linkname == "" || len(h.Linkname) >= fsguard.MaxPathLen || strings.IndexByte(h.Linkname, 0) >= 0 {
			return Entry{}, corrupt(name, "invalid symlink target", nil)
		}
	case tar.TypeLink:
		return Entry{}, corrupt(name, "hard links are refused", nil)
	case tar.TypeChar, tar.TypeBlock:
		return Entry{}, corrupt(name, "device files are refused", nil)
	case tar.TypeFifo:
		return Entry{}, corrupt(name, "fifos are refused", nil)
	default:
		return Entry{}, corrupt(name, fmt.Sprintf("unsupported entry type %q", h.Typeflag), nil)
	}
	return e, nil
}

// checkLimits refuses an archive once it holds more than maxEntries
// entries or maxBytes of file content (no bound when not positive).
func checkLimits(name string, entries int, bytes int64, maxEntries int, maxBytes int64) error {
	if maxEntries > 0 && entries > maxEntries {
		return newError(CodeTooLarge, name, fmt.Sprintf("archive holds more than %d entries", maxEntries), nil)
	}
	if maxBytes > 0 && bytes > maxBytes {
		return newError(CodeTooLarge, name, fmt.Sprintf("archive holds more than %d bytes", maxBytes), nil)
	}
	return nil
}

func (s *scanner) readManifest(h *tar.Header, tr io.Reader) error {
	limit := int64(maxManifestSize)
	if s.maxEntries > 0 {
		limit = min(limit, int64(s.maxEntries+1)*manifestBytesPerItem)
	}
	if h.Size > limit {
		return newError(CodeTooLarge, ManifestName, fmt.Sprintf("manifest is %d bytes, more than %d", h.Size, limit), nil)
	}
	rec := &errRecorder{r: tr}
	sum := sha256.New()
	counted := &tarstream.CountingReader{R: io.TeeReader(io.LimitReader(rec, h.Size), sum)}
	m, err := decodeManifest(counted)
	if err == nil {
		// What the decoder left (trailing whitespace) is hashed and counted too.
		_, err = io.Copy(io.Discard, counted)
	}
	switch {
	case rec.err != nil:
		return s.streamErr(rec.err)
	case err != nil:
		return corrupt(ManifestName, "manifest is not valid JSON", err)
	case counted.N != h.Size:
		return corrupt(ManifestName, "manifest is truncated", nil)
	}
	if m.Version != FormatVersion {
		return newError(CodeUnsupported, ManifestName, fmt.Sprintf("manifest version %d (this build reads %d)", m.Version, FormatVersion), nil)
	}
	m.SHA256, m.JSONSize = hex.EncodeToString(sum.Sum(nil)), h.Size
	s.m = m
	return nil
}

// decodeManifest decodes a manifest as a stream: its entries one at a time, everything else
// (small) gathered and unmarshalled as json.Unmarshal would. Reading the JSON whole first held
// it (about 450 bytes per entry, 14 MiB for 31,000 files) beside the entries decoded from it
// at a restore's peak. Whatever is not one JSON object, with nothing but space after it, is an
// error.
func decodeManifest(r io.Reader) (*Manifest, error) {
	dec := json.NewDecoder(r)
	if err := wantDelim(dec, '{'); err != nil {
		return nil, err
	}
	m := &Manifest{}
	rest := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		// json.Unmarshal matches keys without regard to case; a later one wins.
		if !strings.EqualFold(key, "entries") {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			rest[key] = v
			continue
		}
		for k := range rest {
			if strings.EqualFold(k, "entries") {
				delete(rest, k)
			}
		}
		if m.Entries, err = decodeEntries(dec); err != nil {
			return nil, err
		}
	}
	if err := wantDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the manifest object")
	}
	entries := m.Entries
	raw, err := json.Marshal(rest)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, m); err != nil {
		return nil, err
	}
	m.Entries = entries
	return m, nil
}

// decodeEntries decodes the entries array (or null) one entry at a time.
func decodeEntries(dec *json.Decoder) ([]Entry, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, nil
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("entries: want an array, got %v", t)
	}
	var out []Entry
	for dec.More() {
		out = append(out, Entry{})
		if err := dec.Decode(&out[len(out)-1]); err != nil {
			return nil, err
		}
	}
	return out, wantDelim(dec, ']')
}

func wantDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %v, got %v", want, t)
	}
	return nil
}

// verify compares the archive's entries with the manifest, in order.
func (s *scanner) verify() error {
	m := s.m
	if m == nil {
		return corrupt(ManifestName, "the archive has no manifest as its last entry", nil)
	}
	if len(m.Entries) != len(s.entries) {
		return corrupt(ManifestName, fmt.Sprintf("manifest lists %d entries, the archive holds %d", len(m.Entries), len(s.entries)), nil)
	}
	for i := range s.entries {
		if d := entryDiff(&m.Entries[i], &s.entries[i]); d != "" {
			return corrupt(s.entries[i].Path, "entry differs from the manifest: "+d, nil)
		}
	}
	if t := totals(s.entries); t != m.Totals {
		return corrupt(ManifestName, fmt.Sprintf("manifest totals %+v differ from the archive's %+v", m.Totals, t), nil)
	}
	return nil
}

func entryDiff(want, got *Entry) string {
	switch {
	case want.Path != got.Path:
		return fmt.Sprintf("path %q, manifest says %q", got.Path, want.Path)
	case want.Type != got.Type:
		return fmt.Sprintf("type %s, manifest says %s", got.Type, want.Type)
	case want.Mode != got.Mode:
		return fmt.Sprintf("mode %o, manifest says %o", got.Mode, want.Mode)
	case want.Size != got.Size:
		return fmt.Sprintf("size %d, manifest says %d", got.Size, want.Size)
	case want.Sparse != got.Sparse:
		return fmt.Sprintf("sparse %t, manifest says %t", got.Sparse, want.Sparse)
	case want.SHA256 != got.SHA256:
		return fmt.Sprintf("sha256 %s, manifest says %s", got.SHA256, want.SHA256)
	case want.LinkTarget != got.LinkTarget:
		return fmt.Sprintf("link target %q, manifest says %q", got.LinkTarget, want.LinkTarget)
	case !want.MTime.Equal(got.MTime):
		return fmt.Sprintf("mtime %s, manifest says %s", got.MTime, want.MTime)
	}
	return ""
}

// errRecorder remembers the error of the archive reader, so that a failed
// write can be blamed on the archive rather than the disk.
type errRecorder struct {
	r   io.Reader
	err error
}

func (e *errRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// hashSink checks an archive without writing anything.
type hashSink struct {
	ctx context.Context
	buf []byte
}

func (hashSink) dir(*Entry) error     { return nil }
func (hashSink) symlink(*Entry) error { return nil }
func (h hashSink) file(e *Entry, r io.Reader) (string, int64, error) {
	if e.Sparse {
		return hashSparse(h.ctx, e, r, h.buf)
	}
	return hashContent(h.ctx, r, h.buf)
}

// hashContent reads r to its end through buf and returns the SHA-256 of
// what it read, stopping early when ctx ends.
func hashContent(ctx context.Context, r io.Reader, buf []byte) (string, int64, error) {
	sum := sha256.New()
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return "", n, err
		}
		m, err := r.Read(buf)
		sum.Write(buf[:m])
		n += int64(m)
		if err == io.EOF {
			return hex.EncodeToString(sum.Sum(nil)), n, nil
		}
		if err != nil {
			return "", n, err
		}
	}
}

// ReadManifest reads a snapshot stream to its end, checks every entry as
// Restore would (names, types, sizes, SHA-256 against the manifest) but
// writes nothing, and returns the manifest. It needs no workspace: the
// controller uses it to verify and export stored snapshots.
func ReadManifest(ctx context.Context, r io.Reader) (*Manifest, error) {
	return newScanner(ctx, 0, 0).run(r, hashSink{ctx: ctx, buf: make([]byte, copyBufSize)})
}
