package controller

// Incremental captures (DESIGN.md, "Incremental captures"): the controller asks the runner for
// refs relative to the newest receipt, checks every ref against that receipt's resolved
// manifest as the capture's own manifest streams past, and writes the new receipt's resolved
// manifest (savedcopy/resolved.go) beside the archive. A ref may only name the file at the same
// path in the parent's tree, with the same SHA-256, size and sparse flag: the runner cannot point
// at bytes the workspace did not have, nor at another workspace's, and the entries one receipt
// takes from a layer stay a subsequence of that layer's (composition reads each layer once).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"filippo.io/age"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/savedcopy"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/gitstate"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// resolver checks a capture's manifest entries against the parent's tree and writes the
// resolved manifest into the blob store as they come.
type resolver struct {
	snap   *api.Snapshot
	parent *savedcopy.ResolvedReader // nil for a full capture
	cur    *savedcopy.ResolvedEntry  // the parent's entry at the cursor
	remap  []int                     // parent layer → this receipt's layer (-1: none)
	used   []bool
	layers []savedcopy.Layer
	w      *savedcopy.ResolvedWriter
	pw     *io.PipeWriter
	put    chan error
}

// chooseParent decides whether the capture after prev (the workspace's receipts, oldest first)
// can be incremental, and opens the parent's resolved manifest if so. Too many layers, or layers
// storing more than twice the chain's base, make it full: a full capture compacts the chain.
func (s *Server) chooseParent(ctx context.Context, prev []api.Snapshot) *savedcopy.ResolvedReader {
	if len(prev) == 0 {
		return nil
	}
	p := prev[len(prev)-1]
	if p.ManifestKey == "" || p.ReclaimedAt != nil || len(p.Layers)+1 >= savedcopy.MaxLayers {
		return nil
	}
	rr, err := s.archives.OpenResolved(ctx, p)
	if err != nil {
		s.log.Warn("parent's resolved manifest unreadable: capturing in full", "snapshot", p.ID, "err", err)
		return nil
	}
	// The chain's base (its largest layer) stands for a full capture; once the layers store as
	// much again, superseded bytes outgrow the tree and a full capture compacts them.
	stored, base := p.Bytes, p.Bytes
	for _, l := range rr.Header.Layers {
		stored += l.Bytes
		base = max(base, l.Bytes)
	}
	if stored > 2*base {
		rr.Close()
		return nil
	}
	return rr
}

// startResolver starts storing snap's resolved manifest; parent is nil for a full capture.
func (s *Server) startResolver(ctx context.Context, snap *api.Snapshot, parent *savedcopy.ResolvedReader, parentSnap api.Snapshot) (*resolver, error) {
	r := &resolver{snap: snap, parent: parent, put: make(chan error, 1)}
	if parent != nil {
		r.layers = append(r.layers, savedcopy.Layer{Key: parentSnap.ObjectKey, Bytes: parentSnap.Bytes, SHA256: parentSnap.SHA256, Encrypted: parentSnap.Encrypted})
		r.remap = []int{1}
		kept := map[string]bool{}
		for _, k := range parentSnap.Layers {
			kept[k] = true
		}
		for _, l := range parent.Header.Layers {
			if kept[l.Key] {
				r.layers = append(r.layers, l)
				r.remap = append(r.remap, len(r.layers))
			} else {
				r.remap = append(r.remap, -1)
			}
		}
		r.used = make([]bool, len(r.layers)+1)
	}
	var rcpt age.Recipient
	if snap.Encrypted {
		rcpt = s.identity.Recipient()
	}
	pr, pw := io.Pipe()
	r.pw = pw
	// The store reads first: age writes its header as soon as it starts.
	started := s.routines.Go("resolved manifest "+snap.ID, func(context.Context) {
		_, perr := s.blobs.Put(ctx, snap.ManifestKey, pr, "")
		pr.CloseWithError(perr)
		r.put <- perr
	})
	if !started {
		pr.Close()
		r.close()
		return nil, protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")
	}
	w, err := savedcopy.NewResolvedWriter(pw, rcpt, savedcopy.ResolvedHeader{Snapshot: snap.ID, Layers: r.layers})
	if err != nil {
		r.abort(err)
		return nil, err
	}
	r.w = w
	return r, nil
}

// entry takes the capture manifest's next entry (OnManifestEntry).
func (r *resolver) entry(e snapshot.Entry) error {
	out := savedcopy.ResolvedEntry{Entry: e}
	if e.Ref {
		l, err := r.refLayer(&e)
		if err != nil {
			return err
		}
		out.Layer = l
	}
	if err := r.w.Add(out); err != nil {
		return fmt.Errorf("write resolved manifest: %w", err)
	}
	return nil
}

// refLayer finds the parent's file at e's path and checks that it is the content e names.
func (r *resolver) refLayer(e *snapshot.Entry) (int, error) {
	bad := func(why string) (int, error) {
		return 0, protocol.Errorf(protocol.CodeCorrupt, "capture of workspace %s: the ref %s %s", r.snap.WorkspaceID, e.Path, why)
	}
	if r.parent == nil {
		return bad("is in a capture that is not incremental")
	}
	for r.cur == nil || snapshot.CmpTree(r.cur.Path, e.Path) < 0 {
		next, err := r.parent.Next()
		if err == io.EOF {
			return bad("names no file of the parent receipt")
		}
		if err != nil {
			return 0, err
		}
		r.cur = &next
	}
	p := r.cur
	if p.Path != e.Path || p.Type != snapshot.TypeFile || p.SHA256 != e.SHA256 || p.Size != e.Size || p.Sparse != e.Sparse {
		return bad("is not the parent receipt's file at that path (content, size or sparseness differ)")
	}
	if p.Layer < 0 || p.Layer >= len(r.remap) || r.remap[p.Layer] < 0 {
		return 0, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: resolved manifest names a layer it does not keep", r.parent.Header.Snapshot)
	}
	l := r.remap[p.Layer]
	r.used[l] = true
	return l, nil
}

// finish writes the trailer with what was verified and waits for the store.
func (r *resolver) finish(v *snapshot.Verified) error {
	m := snapshot.Manifest{Version: snapshot.FormatVersion, WorkspaceID: v.WorkspaceID, Epoch: v.Epoch, Parent: v.Parent,
		ToolVersion: v.ToolVersion, CreatedAt: v.CreatedAt, Entries: []snapshot.Entry{}, Skipped: []snapshot.Skipped{},
		Totals: v.Totals, GitError: v.GitError}
	var err error
	if len(v.Git) > 0 {
		m.Git = &gitstate.State{}
		err = json.Unmarshal(v.Git, m.Git)
	}
	var meta []byte
	if err == nil {
		meta, err = json.Marshal(m)
	}
	if err == nil {
		err = r.w.End(meta, v.TreeSHA256)
	}
	if err != nil {
		r.abort(err)
		return err
	}
	r.pw.Close()
	return <-r.put
}

// abort stops the store: no manifest object is kept.
func (r *resolver) abort(err error) {
	r.pw.CloseWithError(err)
	<-r.put
	if r.parent != nil {
		r.parent.Close()
	}
}

// layerKeys are the objects other than its own that the receipt uses.
func (r *resolver) layerKeys() []string {
	var keys []string
	for i, l := range r.layers {
		if r.used[i+1] {
			keys = append(keys, l.Key)
		}
	}
	return keys
}

func (r *resolver) close() {
	if r.parent != nil {
		r.parent.Close()
	}
}
