package controller

// Reads of a workspace's saved copy. A workspace whose allocation is gone (closed, or being
// reopened from its last receipt) answers file reads from that receipt's archive: listings and
// stats from the archive's manifest, file contents streamed out of the archive itself. A read
// never falls back to a save while a live tree may hold work that save lacks.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/savedcopy"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Headers saying where a file read came from.
const (
	HeaderSource     = "X-Tether-Source"     // protocol.SourceLive or protocol.SourceSaved
	HeaderAllocation = "X-Tether-Allocation" // live: the allocation read
	HeaderSnapshot   = "X-Tether-Snapshot"   // saved: the receipt read
	HeaderSavedAt    = "X-Tether-Saved-At"   // saved: when that receipt was written (RFC 3339)
)

// fileSource is where one read request is served from: the connected runner of the live
// allocation, or one receipt, resolved once when the request starts and kept to its end.
type fileSource struct {
	ws   api.Workspace
	conn *hub.Conn     // live
	snap *api.Snapshot // saved
}

func (f fileSource) info() protocol.ReadSource {
	if f.snap != nil {
		at := f.snap.CreatedAt.UTC()
		return protocol.ReadSource{Source: protocol.SourceSaved, SnapshotID: f.snap.ID, SavedAt: &at}
	}
	return protocol.ReadSource{Source: protocol.SourceLive, AllocationID: f.ws.AllocationID}
}

// setHeaders names the source on a response (errors included: a not_found of a saved copy
// says it is the saved copy that lacks the path).
func (f fileSource) setHeaders(h http.Header) {
	src := f.info()
	h.Set(HeaderSource, src.Source)
	if src.Source == protocol.SourceLive {
		h.Set(HeaderAllocation, src.AllocationID)
		return
	}
	h.Set(HeaderSnapshot, src.SnapshotID)
	h.Set(HeaderSavedAt, src.SavedAt.Format(time.RFC3339Nano))
}

// readSource decides where a file read of a workspace is served from.
//
//   - ready or closing with its runner connected: live.
//   - closed, or reopening (the new allocation is being restored from exactly the last
//     receipt and is not served until it is ready): the last receipt.
//   - closing after the close released the allocation, which it does only once the tree is
//     saved: the last receipt.
//   - lost (its sandbox was destroyed outside Tether): the last receipt, the newest work that
//     survives (a recovering one is unavailable: it may be restoring an older receipt).
//   - stopped (or stopping once its runner is gone, or starting before its runner is back): the
//     last receipt only when it holds exactly the tree the stop left (the digest the stop
//     recorded), else unavailable, naming the start that makes the files readable.
//   - anything else is unavailable: above all a ready workspace whose runner is not
//     connected, whose tree may hold work newer than any save.
func (s *Server) readSource(ctx context.Context, idOrName string) (fileSource, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return fileSource{}, err
	}
	src := fileSource{ws: ws}
	switch ws.State {
	case api.StateReady, api.StateClosing:
		if c, ok := s.runnerOf(ctx, ws.AllocationID); ok {
			src.conn = c
			return src, nil
		}
		if ws.State == api.StateClosing {
			if a, err := s.store.GetAllocation(ctx, ws.AllocationID); err == nil && a.State == store.AllocDestroyed {
				return s.savedSource(ctx, src)
			}
		}
		return src, protocol.Errorf(protocol.CodeUnavailable,
			"the runner of workspace %s is not connected: its files may hold work newer than any save, so no saved copy is served in their place", ws.ID)
	case api.StateClosed, api.StateReopening, api.StateLost:
		// A lost workspace's live files are gone: its last receipt is all there is to read.
		return s.savedSource(ctx, src)
	case api.StateStopping, api.StateStopped, api.StateStarting:
		// A stopping workspace's runner is read while it is there (its runs are being stopped).
		if c, ok := s.runnerOf(ctx, ws.AllocationID); ok && ws.State == api.StateStopping {
			src.conn = c
			return src, nil
		}
		return s.stoppedSource(ctx, src)
	case api.StateDeleted:
		return src, protocol.Errorf(protocol.CodeNotFound, "workspace %s was deleted; its snapshots remain (tether snapshot ls)", ws.ID)
	}
	return src, protocol.Errorf(protocol.CodeUnavailable, "workspace %s is %s: it has no files to read", ws.ID, ws.State)
}

// stoppedSource serves a stopped workspace's reads from its last receipt when the tree its
// sandbox kept is that receipt's (the digest its stop recorded), and refuses them otherwise: the
// sandbox may hold work no save has.
func (s *Server) stoppedSource(ctx context.Context, src fileSource) (fileSource, error) {
	a, err := s.store.GetAllocation(ctx, src.ws.AllocationID)
	if err != nil {
		return src, err
	}
	last, err := s.lastReceipt(ctx, src.ws.ID)
	if err != nil {
		return src, err
	}
	// Only a stopped allocation's digest says what its sandbox holds (a start clears it, and a
	// stop not yet done has not recorded its own).
	if last != nil && a.State == store.AllocStopped && a.StoppedTree != "" && last.Summary.Tree == a.StoppedTree {
		src.snap = last
		return src, nil
	}
	return src, protocol.Errorf(protocol.CodeUnavailable,
		"workspace %s is %s and its sandbox keeps work newer than any save, so no saved copy is served in its place; start it with \"tether workspace start %s\"", src.ws.ID, src.ws.State, src.ws.ID)
}

func (s *Server) savedSource(ctx context.Context, src fileSource) (fileSource, error) {
	last, err := s.lastReceipt(ctx, src.ws.ID)
	if err != nil {
		return src, err
	}
	if last == nil {
		return src, protocol.Errorf(protocol.CodeUnavailable, "workspace %s is %s and has no saved copy to read", src.ws.ID, src.ws.State)
	}
	src.snap = last
	return src, nil
}

// savedFilesGet answers GET list/stat/read from src's receipt.
func (s *Server) savedFilesGet(w http.ResponseWriter, r *http.Request, src fileSource) {
	q := r.URL.Query()
	var args protocol.FsReadArgs
	ranged := false
	if !q.Has("list") && !q.Has("stat") {
		var err error
		if args, ranged, err = parseRange(r.Header.Get("Range")); err != nil {
			writeError(w, err)
			return
		}
	}
	// The same lexical rules as the runner's guard, before anything is read.
	clean, err := fsguard.Clean(filePath(r))
	if err != nil {
		writeError(w, err)
		return
	}
	idx, err := s.savedIndexes.Open(r.Context(), src.snap)
	if err != nil {
		writeError(w, err)
		return
	}
	defer idx.Close()
	e, pos, err := idx.Lookup(src.snap, clean)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case q.Has("list"):
		page, err := idx.List(e, pos, clean, q.Get("cursor"), q.Get("limit"))
		if err != nil {
			writeError(w, err)
			return
		}
		page.ReadSource = src.info()
		writeJSON(w, http.StatusOK, page)
	case q.Has("stat"):
		fi := savedcopy.FileInfo(e)
		fi.ReadSource = src.info()
		writeJSON(w, http.StatusOK, fi)
	default:
		s.readSaved(w, r, src.snap, e, pos, args, ranged)
	}
}

// readSaved streams one archived file (or a range of it) out of the receipt's archive, opened
// once for this request. The archive is read up to the entry (at position pos, since entries
// come in manifest order) and no further. Every byte of the entry is hashed, those sent and
// those around a range alike, and checked against the manifest's SHA-256 before the last byte
// goes out: on a mismatch, or any failure once the headers are sent, the response is cut off,
// never ended, so no client can take a partial or altered body for the file.
func (s *Server) readSaved(w http.ResponseWriter, r *http.Request, snap *api.Snapshot, e snapshot.Entry, pos int, args protocol.FsReadArgs, ranged bool) {
	switch e.Type {
	case snapshot.TypeSymlink:
		writeError(w, protocol.Errorf(protocol.CodeSymlinkRefused, "%s is a symlink; it is never followed", e.Path))
		return
	case snapshot.TypeDir:
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "%s is a directory, not a regular file", e.Path))
		return
	}
	off, n, err := args.Resolve(e.Size)
	if err != nil {
		writeError(w, err)
		return
	}
	tr, closeEntry, err := s.archives.OpenEntry(r.Context(), snap, e, pos)
	if err != nil {
		writeError(w, err)
		return
	}
	defer closeEntry()
	status := writeReadHeaders(w, protocol.FsReadReply{Info: savedcopy.FileInfo(e), Offset: off, Length: n}, ranged)
	w.WriteHeader(status)
	cut := func(what string, err error) {
		s.log.Warn("saved file read cut off", "snapshot", snap.ID, "path", e.Path, "what", what, "err", err)
		panic(http.ErrAbortHandler)
	}
	// A sparse entry's manifest digest is not a SHA-256 of its bytes (snapshot.ContentHash).
	// The whole-file SHA-256 goes out as a trailer, so for a sparse entry it is computed
	// beside the digest that is checked.
	sum := snapshot.ContentHash(e)
	plain, both := hash.Hash(sum), io.Writer(sum)
	if e.Sparse {
		plain = sha256.New()
		both = io.MultiWriter(sum, plain)
	}
	if _, err := io.CopyN(both, tr, off); err != nil {
		cut("skip to the range", err)
	}
	// All but the last byte go out now; the last one only once the whole entry checked out.
	held := n
	if held > 0 {
		held = 1
	}
	if _, err := io.CopyN(io.MultiWriter(w, both), tr, n-held); err != nil {
		cut("stream", err)
	}
	last := make([]byte, held)
	if _, err := io.ReadFull(tr, last); err != nil {
		cut("stream", err)
	}
	both.Write(last)
	if _, err := io.CopyN(both, tr, e.Size-off-n); err != nil {
		cut("hash the rest of the entry", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != e.SHA256 {
		cut("verify", fmt.Errorf("the archived bytes hash to %s, the manifest says %s", got, e.SHA256))
	}
	if _, err := w.Write(last); err != nil {
		cut("stream", err)
	}
	if !ranged {
		w.Header().Set(HeaderSHA256, hex.EncodeToString(plain.Sum(nil)))
	}
}
