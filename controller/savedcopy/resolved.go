package savedcopy

// A receipt's resolved manifest (api.Snapshot.ManifestKey) is its whole tree with, for every
// file, the object that holds its bytes: the receipt's own archive (layer 0) or an earlier
// capture's (layers 1..n, listed with their size and SHA-256 so a layer stays verifiable after
// its own receipt was pruned). It is JSON lines, zstd-compressed, age-encrypted like the archive
// when encryption is on: a header, then one line per entry in archive order. Every capture
// writes one, full ones too: the next incremental capture reads its parent's entries from it
// rather than decompressing the parent's whole archive.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// resolvedVersion is the format this build writes and reads.
const resolvedVersion = 1

// maxResolvedLine bounds one line (an entry with a 4 KiB path and link target, escaped).
const maxResolvedLine = 256 << 10

// MaxLayers bounds a receipt's layers; past it the next capture is full (and compacts).
const MaxLayers = 16

// Layer is an object holding bytes of a receipt's tree.
type Layer struct {
	Key       string `json:"key"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Encrypted bool   `json:"encrypted,omitempty"`
}

// ResolvedHeader is the resolved manifest's first line.
type ResolvedHeader struct {
	Version  int    `json:"version"`
	Snapshot string `json:"snapshot"`
	// Layers are the objects other than the receipt's own (layer i+1 is Layers[i]).
	Layers []Layer `json:"layers"`
}

// resolvedLine is an entry, or the last line: the capture manifest's fields other than its
// entries (known once they all passed) and the tree's digest.
type resolvedLine struct {
	ResolvedEntry
	End      bool            `json:"end,omitempty"`
	Manifest json.RawMessage `json:"manifest,omitempty"`
	Tree     string          `json:"tree,omitempty"`
}

// ResolvedEntry is one entry of the tree; Layer says which object holds a file's bytes.
type ResolvedEntry struct {
	snapshot.Entry
	Layer int `json:"l,omitempty"`
}

// ManifestKey is where a receipt's resolved manifest is stored.
func ManifestKey(workspaceID, snapshotID string, encrypted bool) string {
	key := fmt.Sprintf("snapshots/%s/%s.manifest.zst", workspaceID, snapshotID)
	if encrypted {
		key += ".age"
	}
	return key
}

// ResolvedWriter writes a resolved manifest into w.
type ResolvedWriter struct {
	enc   *zstd.Encoder
	crypt io.WriteCloser
	bw    *bufio.Writer
}

// NewResolvedWriter starts a resolved manifest, encrypted to rcpt when it is set.
func NewResolvedWriter(w io.Writer, rcpt age.Recipient, h ResolvedHeader) (*ResolvedWriter, error) {
	rw := &ResolvedWriter{}
	if rcpt != nil {
		c, err := age.Encrypt(w, rcpt)
		if err != nil {
			return nil, err
		}
		rw.crypt, w = c, c
	}
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return nil, err
	}
	rw.enc, rw.bw = enc, bufio.NewWriterSize(enc, 64<<10)
	h.Version = resolvedVersion
	return rw, rw.line(h)
}

func (rw *ResolvedWriter) line(v any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	rw.bw.Write(js)
	return rw.bw.WriteByte('\n')
}

// Add writes the next entry.
func (rw *ResolvedWriter) Add(e ResolvedEntry) error {
	e.Ref = false
	return rw.line(e)
}

// End writes the last line (meta is the capture manifest with no entries) and closes the
// manifest.
func (rw *ResolvedWriter) End(meta json.RawMessage, tree string) error {
	if err := rw.line(resolvedLine{End: true, Manifest: meta, Tree: tree}); err != nil {
		return err
	}
	if err := rw.bw.Flush(); err != nil {
		return err
	}
	if err := rw.enc.Close(); err != nil {
		return err
	}
	if rw.crypt != nil {
		return rw.crypt.Close()
	}
	return nil
}

// ResolvedReader reads a stored resolved manifest.
type ResolvedReader struct {
	Header ResolvedHeader
	// Manifest and Tree are the last line's, once Next returned io.EOF.
	Manifest json.RawMessage
	Tree     string
	rc       io.Closer
	dec      *zstd.Decoder
	sc       *bufio.Scanner
	last     string
	n        int
	max      int
	closed   bool
}

// OpenResolved opens snap's resolved manifest. maxEntries bounds its entries.
func (a Archives) OpenResolved(ctx context.Context, snap api.Snapshot) (*ResolvedReader, error) {
	if snap.ManifestKey == "" {
		return nil, protocol.Errorf(protocol.CodeNotFound, "snapshot %s has no resolved manifest", snap.ID)
	}
	rc, _, err := a.Blobs.Get(ctx, snap.ManifestKey)
	if err != nil {
		return nil, err
	}
	var r io.Reader = rc
	if snap.Encrypted {
		if r, err = age.Decrypt(rc, a.Identity); err != nil {
			rc.Close()
			return nil, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: manifest: decrypt: %v", snap.ID, err)
		}
	}
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderLowmem(true))
	if err != nil {
		rc.Close()
		return nil, err
	}
	rr := &ResolvedReader{rc: rc, dec: dec, sc: bufio.NewScanner(dec), max: snap.Summary.Entries}
	rr.sc.Buffer(make([]byte, 64<<10), maxResolvedLine)
	if !rr.sc.Scan() {
		rr.Close()
		return nil, rr.bad("no header", rr.sc.Err())
	}
	if err := json.Unmarshal(rr.sc.Bytes(), &rr.Header); err != nil || rr.Header.Version != resolvedVersion || rr.Header.Snapshot != snap.ID ||
		len(rr.Header.Layers) > MaxLayers {
		rr.Close()
		return nil, rr.bad(fmt.Sprintf("header of another snapshot, version or too many layers (%d)", len(rr.Header.Layers)), err)
	}
	return rr, nil
}

func (rr *ResolvedReader) bad(what string, err error) error {
	if err != nil {
		what += ": " + err.Error()
	}
	return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: resolved manifest: %s", rr.Header.Snapshot, what)
}

// Next returns the next entry, or io.EOF after the last.
func (rr *ResolvedReader) Next() (ResolvedEntry, error) {
	if rr.Manifest != nil {
		return ResolvedEntry{}, io.EOF
	}
	if !rr.sc.Scan() {
		return ResolvedEntry{}, rr.bad("cut short", rr.sc.Err())
	}
	var line resolvedLine
	if err := json.Unmarshal(rr.sc.Bytes(), &line); err != nil {
		return ResolvedEntry{}, rr.bad("an entry does not parse", err)
	}
	if line.End {
		if rr.max > 0 && rr.n != rr.max || len(line.Manifest) == 0 || rr.sc.Scan() {
			return ResolvedEntry{}, rr.bad(fmt.Sprintf("%d entries, the receipt says %d", rr.n, rr.max), nil)
		}
		rr.Manifest, rr.Tree = line.Manifest, line.Tree
		return ResolvedEntry{}, io.EOF
	}
	e := line.ResolvedEntry
	if rr.n++; rr.max > 0 && rr.n > rr.max {
		return e, rr.bad("more entries than the receipt", nil)
	}
	if rr.last != "" && snapshot.CmpTree(rr.last, e.Path) >= 0 || e.Layer < 0 || e.Layer > len(rr.Header.Layers) {
		return e, rr.bad("entry "+e.Path+" out of order or of an unknown layer", nil)
	}
	rr.last = e.Path
	return e, nil
}

// Close releases the object.
func (rr *ResolvedReader) Close() {
	if rr.closed {
		return
	}
	rr.closed = true
	rr.dec.Close()
	rr.rc.Close()
}
