package snapshot

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tetherhq/tether/sandbox/gitstate"
	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// maxManifestValue bounds one JSON token or value of the manifest as Verify decodes it: an
// entry (a 4 KiB path and a 4 KiB link target, both possibly escaped six bytes a byte), a
// skipped path, the git state.
const maxManifestValue = 128 << 10

var errValueTooLarge = errors.New("manifest value too large")

// manifest decodes the manifest entry as a stream and compares it with the archive's entries,
// already folded into v.entries and v.totals.
func (v *verifier) manifest(h *tar.Header, tr io.Reader) (*Verified, error) {
	if h.Size > v.opts.MaxManifestBytes {
		return nil, newError(CodeTooLarge, ManifestName, fmt.Sprintf("manifest is %d bytes, more than %d", h.Size, v.opts.MaxManifestBytes), nil)
	}
	rec := &errRecorder{r: tr}
	sum := sha256.New()
	counted := &tarstream.CountingReader{R: io.TeeReader(rec, sum)}
	budget := &valueBudget{r: counted}
	md := &manifestDecoder{
		dec: json.NewDecoder(budget), budget: budget, archived: v.entries.n,
		out: &Verified{ManifestSize: h.Size}, entries: newEntryDigest(), opts: &v.opts,
		order: treeOrder{levels: []treeLevel{{dir: "."}}},
	}
	err := md.decode()
	if err == nil {
		_, err = io.Copy(io.Discard, counted)
	}
	var typed *Error
	switch {
	case rec.err != nil:
		return nil, v.s.streamErr(rec.err)
	case budget.over:
		return nil, newError(CodeTooLarge, ManifestName, fmt.Sprintf("a value in the manifest is larger than %d bytes", maxManifestValue), nil)
	case errors.As(err, &typed):
		return nil, err
	case err != nil:
		return nil, corrupt(ManifestName, "manifest is not valid JSON", err)
	case counted.N != h.Size:
		return nil, corrupt(ManifestName, "manifest is truncated", nil)
	}
	out := md.out
	if md.count != v.entries.n {
		return nil, corrupt(ManifestName, fmt.Sprintf("manifest lists %d entries, the archive holds %d", md.count, v.entries.n), nil)
	}
	if md.entries.sum() != v.entries.sum() {
		return nil, corrupt(ManifestName, "manifest entries differ from the archive's", nil)
	}
	// The archive's entries are the manifest's other than refs (their digests matched), so the
	// tree's totals are the manifest's entries'.
	if md.totals != md.all {
		return nil, corrupt(ManifestName, fmt.Sprintf("manifest totals %+v differ from the archive's %+v", md.totals, md.all), nil)
	}
	out.Totals = md.all
	out.ManifestSHA256 = hex.EncodeToString(sum.Sum(nil))
	out.TreeSHA256 = md.treeSum()
	return out, nil
}

// manifestDecoder reads a manifest's JSON token by token, one entry at a time.
type manifestDecoder struct {
	dec      *json.Decoder
	budget   *valueBudget
	archived int // entries in the archive
	out      *Verified
	totals   Totals
	count    int
	// entries folds the manifest's entries, mtimes in UTC as the archive's are, for the
	// comparison; tree folds them as they are, for TreeSHA256 (nil until "entries" is an
	// array: json.Marshal of a nil slice is null).
	entries *entryDigest
	tree    *entryDigest
	// opts are Verify's; all counts every entry (refs included), order checks the refs' place.
	opts  *VerifyOptions
	all   Totals
	order treeOrder
}

// token and value read one token or value within the budget, which bounds the decoder's
// buffer to about twice maxManifestValue (what it read ahead, and the value); past reading,
// InputOffset tells the value's exact size.
func (m *manifestDecoder) token() (json.Token, error) {
	m.budget.reset()
	start := m.dec.InputOffset()
	tok, err := m.dec.Token()
	return tok, m.budget.check(m.dec.InputOffset()-start, err)
}

func (m *manifestDecoder) value(v any) error {
	m.budget.reset()
	start := m.dec.InputOffset()
	err := m.dec.Decode(v)
	return m.budget.check(m.dec.InputOffset()-start, err)
}

func (m *manifestDecoder) delim(want json.Delim) error {
	tok, err := m.token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("want %v, got %v", want, tok)
	}
	return nil
}

func (m *manifestDecoder) decode() error {
	if err := m.delim('{'); err != nil {
		return err
	}
	seen := map[string]bool{} // known keys only, so a handful
	version := 0
	for m.dec.More() {
		tok, err := m.token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		known := true
		switch key {
		case "version":
			err = m.value(&version)
			if err == nil && version != FormatVersion {
				return unsupportedVersion(version)
			}
		case "workspace_id":
			err = m.value(&m.out.WorkspaceID)
		case "epoch":
			err = m.value(&m.out.Epoch)
		case "parent":
			err = m.value(&m.out.Parent)
		case "tool_version":
			err = m.value(&m.out.ToolVersion)
		case "created_at":
			err = m.value(&m.out.CreatedAt)
		case "entries":
			err = m.entryList()
		case "skipped":
			err = m.list(func() error {
				var s Skipped
				m.out.Skipped++
				return m.value(&s)
			})
		case "totals":
			err = m.value(&m.totals)
		case "git":
			err = m.git()
		case "git_error":
			err = m.value(&m.out.GitError)
		default:
			known = false
			err = m.skip()
		}
		if err != nil {
			return err
		}
		seen[key] = known
	}
	if err := m.delim('}'); err != nil {
		return err
	}
	if version != FormatVersion {
		return unsupportedVersion(version)
	}
	if _, err := m.token(); err != io.EOF {
		return fmt.Errorf("data after the manifest's JSON (%v)", err)
	}
	return nil
}

func unsupportedVersion(v int) *Error {
	return newError(CodeUnsupported, ManifestName, fmt.Sprintf("manifest version %d (this build reads %d)", v, FormatVersion), nil)
}

// list calls item for each element of a JSON array (none for null).
func (m *manifestDecoder) list(item func() error) error {
	isArray, err := m.array()
	if err != nil || !isArray {
		return err
	}
	return m.items(item)
}

// array reads the start of an array, or null.
func (m *manifestDecoder) array() (bool, error) {
	tok, err := m.token()
	if err != nil || tok == nil {
		return false, err
	}
	if tok != json.Delim('[') {
		return false, fmt.Errorf("want an array, got %v", tok)
	}
	return true, nil
}

// items calls item for each element of the array just opened, and reads its end.
func (m *manifestDecoder) items(item func() error) error {
	for m.dec.More() {
		if err := item(); err != nil {
			return err
		}
	}
	return m.delim(']')
}

func (m *manifestDecoder) entryList() error {
	isArray, err := m.array()
	if err != nil || !isArray {
		return err
	}
	m.tree = newEntryDigest()
	return m.items(func() error {
		var e Entry
		if err := m.value(&e); err != nil {
			return err
		}
		if err := m.place(&e); err != nil {
			return err
		}
		ref := e.Ref
		e.Ref = false
		js, err := json.Marshal(&e)
		if err != nil {
			return fmt.Errorf("encode entry %s: %w", e.Path, err)
		}
		m.tree.write(js)
		if ref {
			return nil
		}
		if e.MTime.Location() != time.UTC {
			e.MTime = e.MTime.UTC()
			if js, err = json.Marshal(&e); err != nil {
				return fmt.Errorf("encode entry %s: %w", e.Path, err)
			}
		}
		m.entries.write(js)
		if m.count++; m.count > m.archived {
			return corrupt(ManifestName, fmt.Sprintf("manifest lists more entries than the %d the archive holds", m.archived), nil)
		}
		return nil
	})
}

// place checks an entry of the manifest as part of the whole tree: with refs allowed, its
// name, its place in tree order and the limits (the archive's checks saw only the others);
// a ref's claim must be well formed. It then counts it and hands it to OnManifestEntry.
func (m *manifestDecoder) place(e *Entry) error {
	if e.Ref && !m.opts.AllowRefs {
		return corrupt(e.Path, "a ref entry (bytes in an earlier receipt) in a capture that is not incremental", nil)
	}
	if m.opts.AllowRefs {
		var typ byte = tar.TypeReg
		switch e.Type {
		case TypeDir:
			typ = tar.TypeDir
		case TypeSymlink:
			typ = tar.TypeSymlink
		}
		name := e.Path
		if typ == tar.TypeDir {
			name += "/"
		}
		if _, err := entryName(&tar.Header{Name: name, Typeflag: typ}); err != nil {
			return err
		}
		if err := m.order.add(e.Path, e.Type); err != nil {
			return err
		}
		if err := checkLimits(e.Path, m.all.Entries+1, m.all.Bytes+max(e.Size, 0), m.opts.MaxEntries, m.opts.MaxBytes); err != nil {
			return err
		}
	}
	if e.Ref {
		if _, err := hex.DecodeString(e.SHA256); err != nil || len(e.SHA256) != 64 || e.Type != TypeFile || e.Size < 0 || e.Mode&^0o7777 != 0 {
			return corrupt(e.Path, "a ref entry that is not a regular file with a size, a mode and a SHA-256", nil)
		}
		if err := refSurvivesHeader(e); err != nil {
			return err
		}
	}
	m.all.add(e)
	if m.opts.OnManifestEntry != nil {
		return m.opts.OnManifestEntry(*e)
	}
	return nil
}

// refSurvivesHeader refuses a ref whose metadata a tar header would not carry unchanged. Every
// other entry was compared with the header it came in; a ref's claim never passed through one,
// yet a restore writes it as one and checks the result against the manifest: a link target on a
// file, or a time the header cannot hold (Go's zero time becomes 1970), would publish a receipt
// no restore reproduces.
func refSurvivesHeader(e *Entry) error {
	if e.LinkTarget != "" {
		return corrupt(e.Path, "a ref entry (a regular file) with a link target", nil)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := tw.WriteHeader(&tar.Header{Name: "ref", Typeflag: tar.TypeReg, Mode: int64(e.Mode), ModTime: e.MTime, Format: tar.FormatPAX})
	if err == nil {
		err = tw.Close()
	}
	var h *tar.Header
	if err == nil {
		h, err = tar.NewReader(&buf).Next()
	}
	if err != nil || !h.ModTime.Equal(e.MTime) || h.Mode != int64(e.Mode) {
		return corrupt(e.Path, fmt.Sprintf("a ref entry whose mode or mtime (%s) an archive header does not keep", e.MTime.Format(time.RFC3339Nano)), nil)
	}
	return nil
}

// git keeps the git state as archived, once it decodes as one.
func (m *manifestDecoder) git() error {
	var raw json.RawMessage
	if err := m.value(&raw); err != nil {
		return err
	}
	if bytes.Equal(raw, []byte("null")) {
		m.out.Git = nil
		return nil
	}
	var st gitstate.State
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	m.out.Git = raw
	return nil
}

// skip reads past a value this build does not know, a token at a time.
func (m *manifestDecoder) skip() error {
	depth := 0
	for {
		tok, err := m.token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

func (m *manifestDecoder) treeSum() string {
	if m.tree == nil {
		sum := sha256.Sum256([]byte("null"))
		return hex.EncodeToString(sum[:])
	}
	return m.tree.sum()
}

// valueBudget bounds what the JSON decoder may read for one token or value: the decoder
// buffers a whole value, so one huge string would otherwise take as much memory as it has
// bytes.
type valueBudget struct {
	r    io.Reader
	left int
	over bool
}

func (b *valueBudget) reset() { b.left = maxManifestValue }

// check refuses a value of n bytes past the bound.
func (b *valueBudget) check(n int64, err error) error {
	if err == nil && n > maxManifestValue {
		b.over = true
		return errValueTooLarge
	}
	return err
}

func (b *valueBudget) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errValueTooLarge
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= n
	return n, err
}
