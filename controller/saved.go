package controller

// Reads of a workspace's saved copy. A workspace whose allocation is gone (closed, or being
// reopened from its last receipt) answers file reads from that receipt's archive: listings and
// stats from the archive's manifest, file contents streamed out of the archive itself. A read
// never falls back to a save while a live tree may hold work that save lacks.

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
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
		if c, ok := s.hub.Get(ws.AllocationID); ok {
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
	case api.StateClosed, api.StateReopening:
		return s.savedSource(ctx, src)
	case api.StateDeleted:
		return src, protocol.Errorf(protocol.CodeNotFound, "workspace %s was deleted; its snapshots remain (tether snapshot ls)", ws.ID)
	}
	return src, protocol.Errorf(protocol.CodeUnavailable, "workspace %s is %s: it has no files to read", ws.ID, ws.State)
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

// rootEntry stands for the workspace root, which an archive does not hold as an entry.
func rootEntry(snap *api.Snapshot) snapshot.Entry {
	return snapshot.Entry{Path: ".", Type: snapshot.TypeDir, Mode: 0o755, MTime: snap.CreatedAt.UTC()}
}

// savedFileInfo describes an archived entry as the runner describes a live one.
func savedFileInfo(e snapshot.Entry) protocol.FileInfo {
	fi := protocol.FileInfo{Path: e.Path, Name: path.Base(e.Path), Mode: e.Mode & 0o777, Size: e.Size, MTime: e.MTime}
	switch e.Type {
	case snapshot.TypeFile:
		fi.Type = protocol.FileRegular
	case snapshot.TypeDir:
		fi.Type, fi.Size = protocol.FileDir, 0
	case snapshot.TypeSymlink:
		// A link's size is its target's length, as lstat(2) says.
		fi.Type, fi.LinkTarget, fi.Size = protocol.FileSymlink, e.LinkTarget, int64(len(e.LinkTarget))
	default:
		fi.Type = protocol.FileOther
	}
	return fi
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
	idx, err := s.savedIndexFor(r.Context(), src.snap)
	if err != nil {
		writeError(w, err)
		return
	}
	defer idx.Close()
	e, pos, err := idx.lookup(src.snap, clean)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case q.Has("list"):
		page, err := idx.list(e, pos, clean, q.Get("cursor"), q.Get("limit"))
		if err != nil {
			writeError(w, err)
			return
		}
		page.ReadSource = src.info()
		writeJSON(w, http.StatusOK, page)
	case q.Has("stat"):
		fi := savedFileInfo(e)
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
	ctx := r.Context()
	archive, closeArchive, err := s.openArchive(ctx, *snap)
	if err != nil {
		writeError(w, err)
		return
	}
	defer closeArchive()
	raw := &readErr{r: archive}
	dec, err := zstd.NewReader(raw, zstd.WithDecoderMaxWindow(128<<20), zstd.WithDecoderMaxMemory(128<<20))
	if err != nil {
		writeError(w, protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %v", snap.ID, err))
		return
	}
	defer dec.Close()
	tr := tar.NewReader(dec)
	if err := seekEntry(tr, e, pos); err != nil {
		writeError(w, archiveErr(ctx, snap, raw, err))
		return
	}
	status := writeReadHeaders(w, protocol.FsReadReply{Info: savedFileInfo(e), Offset: off, Length: n}, ranged)
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

// seekEntry reads tar headers up to the entry at position pos (global PAX headers aside) and
// checks that it is the regular file e; the reader is then at the entry's first byte.
func seekEntry(tr *tar.Reader, e snapshot.Entry, pos int) error {
	for i := 0; ; {
		h, err := tr.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if i < pos {
			i++
			continue
		}
		if h.Name != e.Path || h.Typeflag != tar.TypeReg || h.Size != e.Size {
			return fmt.Errorf("archive entry %d is %q (type %q, %d bytes), the manifest says the file %q of %d bytes", pos, h.Name, h.Typeflag, h.Size, e.Path, e.Size)
		}
		return nil
	}
}

// archiveErr types a failure to read a saved archive. The stored object's own failure comes
// first: a decoder reading ahead may report the damage it caused (a failed CRC) rather than the
// receipt check that failed under it. A failure of that stream (a cut connection) is passed on
// as it is; anything else wrong with the zstd or tar data is the archive's fault.
func archiveErr(ctx context.Context, snap *api.Snapshot, raw *readErr, err error) error {
	switch {
	case raw.err != nil:
		return raw.err
	case protocol.CodeOf(err) == protocol.CodeInternal && ctx.Err() == nil:
		return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %v", snap.ID, err)
	}
	return err
}

// readErr remembers the error of the stored object's stream, telling a failed read apart from a
// malformed archive.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}
