package savedcopy

// An incremental receipt reads as its whole tree: a plain .tar.zst composed from its layers
// (sandbox/snapshot/compose.go), in its resolved manifest's order. Each layer object is read
// once, front to back, checked against the size and SHA-256 its receipt (or the resolved
// manifest's table) records; each file's bytes against its SHA-256; the tree against the
// receipt's digest. Memory is a few small zstd windows per open layer, whatever the tree.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"filippo.io/age"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// openComposed streams the composed archive of a receipt with layers.
func (a Archives) openComposed(ctx context.Context, snap api.Snapshot) (io.Reader, func(), error) {
	if a.Go == nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "snapshot %s has layers and this reader cannot compose them", snap.ID)
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	if !a.Go("compose "+snap.ID, func(context.Context) { pw.CloseWithError(a.compose(ctx, snap, pw)) }) {
		cancel()
		return nil, nil, protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")
	}
	return pr, func() { cancel(); pr.CloseWithError(context.Canceled) }, nil
}

// layerState is one layer being read.
type layerState struct {
	raw   *receiptReader
	close func()
	tr    *snapshot.LayerReader
}

func (a Archives) openLayer(ctx context.Context, snap api.Snapshot, l Layer) (*layerState, error) {
	rc, _, err := a.Blobs.Get(ctx, l.Key)
	if err != nil {
		return nil, err
	}
	raw := &receiptReader{r: rc, snap: api.Snapshot{ID: snap.ID + " layer " + l.Key, Bytes: l.Bytes, SHA256: l.SHA256}, sum: sha256.New()}
	var plain io.Reader = raw
	if l.Encrypted {
		if plain, err = age.Decrypt(raw, a.Identity); err != nil {
			rc.Close()
			return nil, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: layer %s: decrypt: %v", snap.ID, l.Key, err)
		}
	}
	tr, err := snapshot.OpenLayer(plain, l.Key)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &layerState{raw: raw, tr: tr, close: func() { tr.Close(); rc.Close() }}, nil
}

func (a Archives) compose(ctx context.Context, snap api.Snapshot, w io.Writer) error {
	rr, err := a.OpenResolved(ctx, snap)
	if err != nil {
		return err
	}
	defer rr.Close()
	layers := a.newLayerSet(snap, rr)
	defer layers.close()
	// A sparse file is read twice (its data regions first): a second reader per layer, opened
	// at its first sparse file and moving forward with the first, keeps that one pass per layer
	// instead of one per sparse file.
	scans := a.newLayerSet(snap, rr)
	defer scans.close()
	c, err := snapshot.NewComposer(ctx, w)
	if err != nil {
		return err
	}
	var jsonSize int64
	for n := 0; ; n++ {
		e, err := rr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			c.Abort()
			return err
		}
		js, err := json.Marshal(e.Entry)
		if err != nil {
			c.Abort()
			return err
		}
		jsonSize += int64(len(js))
		if n > 0 {
			jsonSize++
		}
		data := func() (io.Reader, error) { return layers.file(ctx, &e) }
		scan := func() (io.Reader, error) { return scans.file(ctx, &e) }
		if err := c.Add(e.Entry, data, scan); err != nil {
			c.Abort()
			return err
		}
	}
	// Every layer read to its end: its size and SHA-256 must be the recorded ones.
	if err := layers.drain(); err != nil {
		c.Abort()
		return err
	}
	tree, totals := c.Tree()
	if tree != snap.Summary.Tree && snap.Summary.Tree != "" || totals.Entries != snap.Summary.Entries || totals.Bytes != snap.Summary.Bytes {
		c.Abort()
		return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: its layers compose to another tree than the receipt's", snap.ID)
	}
	m, err := manifestParts(rr.Manifest)
	if err != nil {
		c.Abort()
		return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: resolved manifest: %v", snap.ID, err)
	}
	// The manifest entry's size must be known before its bytes: the entries are read again.
	again, err := a.OpenResolved(ctx, snap)
	if err != nil {
		c.Abort()
		return err
	}
	defer again.Close()
	body := io.MultiReader(bytes.NewReader(m.head), &entriesJSON{rr: again}, bytes.NewReader(m.tail))
	size := int64(len(m.head)+len(m.tail)) + jsonSize
	if err := c.Finish(body, size, m.created); err != nil {
		c.Abort()
		return err
	}
	return nil
}

// manifestJSON is a manifest's JSON around its entries.
type manifestJSON struct {
	head, tail []byte
	created    time.Time
}

// manifestParts splits the capture manifest (entries empty) where its entries go.
func manifestParts(meta json.RawMessage) (manifestJSON, error) {
	var m snapshot.Manifest
	if err := json.Unmarshal(meta, &m); err != nil {
		return manifestJSON{}, err
	}
	m.Entries = []snapshot.Entry{}
	js, err := json.Marshal(m)
	if err != nil {
		return manifestJSON{}, err
	}
	// Quotes inside JSON strings are escaped, so this can only be the entries' key.
	at := bytes.Index(js, []byte(`"entries":[]`))
	if at < 0 {
		return manifestJSON{}, fmt.Errorf("no entries in the manifest")
	}
	at += len(`"entries":[`)
	return manifestJSON{head: js[:at], tail: js[at:], created: m.CreatedAt}, nil
}

// entriesJSON reads the resolved manifest's entries as the manifest's JSON list (no brackets).
type entriesJSON struct {
	rr   *ResolvedReader
	buf  bytes.Buffer
	n    int
	done bool
}

func (r *entriesJSON) Read(p []byte) (int, error) {
	for r.buf.Len() == 0 && !r.done {
		e, err := r.rr.Next()
		if err == io.EOF {
			r.done = true
			break
		}
		if err != nil {
			return 0, err
		}
		js, err := json.Marshal(e.Entry)
		if err != nil {
			return 0, err
		}
		if r.n++; r.n > 1 {
			r.buf.WriteByte(',')
		}
		r.buf.Write(js)
	}
	if r.buf.Len() == 0 {
		return 0, io.EOF
	}
	return r.buf.Read(p)
}

// layerSet is a receipt's layers, each opened on first use and then read once, front to back:
// the entries one receipt takes from a layer come in that layer's order.
type layerSet struct {
	a      Archives
	snap   api.Snapshot
	layers []Layer
	open   []*layerState
}

// newLayerSet is snap's layers as its resolved manifest rr lists them (layer 0: its own object).
func (a Archives) newLayerSet(snap api.Snapshot, rr *ResolvedReader) *layerSet {
	layers := append([]Layer{{Key: snap.ObjectKey, Bytes: snap.Bytes, SHA256: snap.SHA256, Encrypted: snap.Encrypted}}, rr.Header.Layers...)
	return &layerSet{a: a, snap: snap, layers: layers, open: make([]*layerState, len(layers))}
}

// file advances e's layer to e and returns a reader of its logical bytes.
func (s *layerSet) file(ctx context.Context, e *ResolvedEntry) (io.Reader, error) {
	if e.Layer < 0 || e.Layer >= len(s.layers) {
		return nil, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %s names layer %d of %d", s.snap.ID, e.Path, e.Layer, len(s.layers))
	}
	if s.open[e.Layer] == nil {
		l, err := s.a.openLayer(ctx, s.snap, s.layers[e.Layer])
		if err != nil {
			return nil, err
		}
		s.open[e.Layer] = l
	}
	return s.open[e.Layer].tr.File(&e.Entry)
}

// drain reads every opened layer to its end, so its size and SHA-256 are checked.
func (s *layerSet) drain() error {
	for _, l := range s.open {
		if l == nil {
			continue
		}
		// The decoder reads ahead in routines of its own; closing it waits for them, so the
		// rest of the object is read here alone (what the decoder read is hashed all the same).
		l.tr.Close()
		if _, err := io.Copy(io.Discard, l.raw); err != nil {
			return err
		}
	}
	return nil
}

func (s *layerSet) close() {
	for _, l := range s.open {
		if l != nil {
			l.close()
		}
	}
}
