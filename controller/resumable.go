package controller

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Resumable uploads (issue 20). The session's record is in the store, so any controller of a
// cluster continues it; its bytes are staged by the workspace's runner in its private state
// directory, and the runner's count of what it staged and hashed is the offset a client resumes
// from. Each chunk is one PUT at an offset, relayed to the runner as one fs_upload_chunk; the
// chunk that completes the file publishes it if the whole SHA-256 is the declared one, else
// nothing is published (corrupt). Expired sessions are removed by gc, staged bytes included.

const (
	// DefaultUploadTTL is how long a session may be continued when its creation names no TTL.
	DefaultUploadTTL = 24 * time.Hour
	// MaxUploadTTL is the longest a session may live.
	MaxUploadTTL = 7 * 24 * time.Hour
	// minUploadTTL keeps a session alive long enough to send one chunk.
	minUploadTTL = time.Minute
	// expireUploadsBatch bounds the sessions one gc pass removes.
	expireUploadsBatch = 256
)

func (s *Server) uploadView(u store.UploadSession) api.Upload {
	v := api.Upload{ID: u.ID, WorkspaceID: u.WorkspaceID, Path: u.Path, Size: u.Size, SHA256: u.SHA256, Mode: u.Mode, Replace: u.Replace,
		Offset: u.Offset, Received: u.Received, MaxChunk: protocol.MaxUploadChunk, CreatedBy: u.CreatedBy,
		CreatedAt: u.CreatedAt, ExpiresAt: u.ExpiresAt}
	if !u.CompletedAt.IsZero() {
		at := u.CompletedAt
		v.CompletedAt, v.Offset = &at, u.Size
		v.Result = &protocol.FsWriteResult{Path: u.Path, Bytes: u.Size, SHA256: u.SHA256}
	}
	return v
}

func (s *Server) handleUploadCreate(w http.ResponseWriter, r *http.Request) {
	ws, c, _, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.UploadCreate
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	ttl := DefaultUploadTTL
	if req.TTL != nil {
		ttl = time.Duration(*req.TTL)
	}
	switch {
	case req.Path == "":
		err = protocol.Errorf(protocol.CodeInvalidArgument, "an upload needs a path")
	case req.Size < 0:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "size %d is negative", req.Size)
	case s.cfg.MaxFileSize > 0 && req.Size > s.cfg.MaxFileSize:
		err = protocol.Errorf(protocol.CodeTooLarge, "%d bytes exceed the file size limit of %d", req.Size, s.cfg.MaxFileSize)
	case !validSHA256(req.SHA256):
		err = protocol.Errorf(protocol.CodeInvalidArgument, "sha256 %q: want 64 lowercase hex digits", req.SHA256)
	case req.Mode&^0o777 != 0:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "mode %o: only permission bits (0777) can be set", req.Mode)
	case ttl < minUploadTTL || ttl > MaxUploadTTL:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "ttl %s: want between %s and %s", ttl, minUploadTTL, MaxUploadTTL)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	// The guard judges the path now, and a file that would refuse the publish is said before a
	// byte is sent rather than after a gigabyte.
	var fi protocol.FileInfo
	err = c.Call(r.Context(), protocol.OpFsStat, 0, protocol.FsPathArgs{Path: req.Path}, &fi)
	switch {
	case err == nil && fi.Type == protocol.FileDir:
		err = protocol.Errorf(protocol.CodeExists, "%s: a directory exists at the destination", fi.Path)
	case err == nil && !req.Replace:
		err = protocol.Errorf(protocol.CodeExists, "%s exists (replace it with --replace)", fi.Path)
	case protocol.CodeOf(err) == protocol.CodeNotFound:
		err = nil
	}
	if err != nil {
		writeError(w, err)
		return
	}
	now := s.cfg.Clock.Now().UTC()
	u := store.UploadSession{ID: protocol.UploadIDPrefix + newPreviewToken(), WorkspaceID: ws.ID, Path: req.Path, Size: req.Size,
		SHA256: req.SHA256, Mode: req.Mode, Replace: req.Replace, CreatedBy: principalOf(r.Context()).String(),
		CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := s.store.CreateUploadSession(r.Context(), u); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("upload started", "workspace", ws.ID, "upload", u.ID, "path", u.Path, "size", u.Size, "by", u.CreatedBy)
	writeJSON(w, http.StatusCreated, s.uploadView(u))
}

func validSHA256(h string) bool {
	b, err := hex.DecodeString(h)
	return err == nil && len(b) == 32 && strings.ToLower(h) == h
}

// uploadOf finds the route's session of the route's workspace: another workspace's session, an
// expired one and one that does not exist are the same not_found.
func (s *Server) uploadOf(r *http.Request, ws api.Workspace) (store.UploadSession, error) {
	id := r.PathValue("upload")
	gone := protocol.Errorf(protocol.CodeNotFound, "upload %q not found", id)
	if !protocol.ValidUploadID(id) {
		return store.UploadSession{}, gone
	}
	u, err := s.store.GetUploadSession(r.Context(), id)
	if err != nil {
		return u, err
	}
	if u.WorkspaceID != ws.ID || !s.cfg.Clock.Now().Before(u.ExpiresAt) {
		return u, gone
	}
	return u, nil
}

// routeUpload finds the route's workspace and its session (uploadOf).
func (s *Server) routeUpload(r *http.Request) (api.Workspace, store.UploadSession, error) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		return ws, store.UploadSession{}, err
	}
	u, err := s.uploadOf(r, ws)
	return ws, u, err
}

// chunkArgs describe u to the runner, for a chunk of n bytes at off.
func chunkArgs(u store.UploadSession, off, n int64) protocol.FsUploadChunkArgs {
	return protocol.FsUploadChunkArgs{Session: u.ID, Path: u.Path, Size: u.Size, SHA256: u.SHA256, Mode: u.Mode, Replace: u.Replace,
		ExpiresAt: u.ExpiresAt, Offset: off, Length: n}
}

// checkRunnerStatus bounds what a runner says it holds of u: never more than the file, and
// after a chunk exactly what it was sent (a runner cannot claim bytes it never got).
func checkRunnerStatus(u store.UploadSession, st protocol.FsUploadStatus, want int64) error {
	if st.Session != u.ID || st.Offset < 0 || st.Offset > u.Size || (want >= 0 && st.Offset != want) {
		return protocol.Errorf(protocol.CodeCorrupt, "the runner reported offset %d of upload %s (%d bytes); expected %d", st.Offset, u.ID, u.Size, want)
	}
	if st.Done && (st.Result == nil || st.Result.Bytes != u.Size || st.Result.SHA256 != u.SHA256 || st.Offset != u.Size) {
		return protocol.Errorf(protocol.CodeCorrupt, "the runner reported upload %s published with a result that is not the declared file", u.ID)
	}
	return nil
}

// handleUploadChunk takes one chunk: PUT …/uploads/{upload}?offset=N with a Content-Length of
// at most MaxUploadChunk. 200 with the session while bytes are missing; 201 once published.
func (s *Server) handleUploadChunk(w http.ResponseWriter, r *http.Request) {
	ws, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	u, err := s.uploadOf(r, ws)
	if err != nil {
		writeError(w, err)
		return
	}
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	n := r.ContentLength
	switch {
	case err != nil || off < 0:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "a chunk needs ?offset=N (bytes from the start)")
	case n < 0:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "a chunk needs a Content-Length")
	case n > protocol.MaxUploadChunk:
		err = protocol.Errorf(protocol.CodeTooLarge, "a chunk of %d bytes exceeds %d", n, protocol.MaxUploadChunk)
	case off > u.Size:
		err = protocol.Errorf(protocol.CodeInvalidRange, "offset %d is beyond the upload's %d bytes", off, u.Size)
	case n > u.Size-off:
		err = protocol.Errorf(protocol.CodeInvalidRange, "a chunk of %d bytes at offset %d goes past the upload's %d bytes", n, off, u.Size)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if !u.CompletedAt.IsZero() {
		// Published already; the answer to the last chunk was lost.
		writeJSON(w, http.StatusCreated, s.uploadView(u))
		return
	}
	if off != u.Offset {
		// Not where the last chunk left it: the runner says where it is before a byte of a
		// misplaced chunk is read (a client that lost track learns it for the price of a header).
		if held, err := s.runnerOffset(r.Context(), ws, u); err == nil && held != off {
			writeError(w, protocol.Errorf(protocol.CodeConflict, "upload %s is at offset %d, not %d", u.ID, held, off))
			return
		}
	}
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, n)}
	var st protocol.FsUploadStatus
	err = c.CallWithBody(r.Context(), protocol.OpFsUploadChunk, epoch, chunkArgs(u, off, n), body, &st)
	if err == nil {
		err = checkRunnerStatus(u, st, off+n)
	}
	// Recorded whatever happened: what was received counts, and the request may be gone.
	var completed time.Time
	if err == nil && st.Done {
		completed = s.cfg.Clock.Now().UTC()
	}
	offset := u.Offset
	if err == nil {
		offset = st.Offset
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	if rerr := s.store.RecordUploadProgress(rctx, u.ID, offset, body.n, completed); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		writeError(w, err)
		return
	}
	u.Offset, u.Received, u.CompletedAt = offset, u.Received+body.n, completed
	if st.Done {
		s.log.Info("upload published", "workspace", ws.ID, "upload", u.ID, "path", u.Path, "size", u.Size, "received", u.Received)
		writeJSON(w, http.StatusCreated, s.uploadView(u))
		return
	}
	writeJSON(w, http.StatusOK, s.uploadView(u))
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// handleUploadGet answers a session with the offset its runner holds (the last one confirmed
// when the runner cannot be asked).
func (s *Server) handleUploadGet(w http.ResponseWriter, r *http.Request) {
	ws, u, err := s.routeUpload(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if u.CompletedAt.IsZero() {
		if off, err := s.runnerOffset(r.Context(), ws, u); err == nil {
			u.Offset = off
		} else if protocol.CodeOf(err) == protocol.CodeCorrupt {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.uploadView(u))
}

// runnerOffset asks the workspace's runner how much of u it holds: nothing (a new runner, a
// reopened workspace) is offset 0.
func (s *Server) runnerOffset(ctx context.Context, ws api.Workspace, u store.UploadSession) (int64, error) {
	c, err := s.runnerFor(ctx, ws.ID)
	if err != nil {
		return 0, err
	}
	var st protocol.FsUploadStatus
	err = c.Call(ctx, protocol.OpFsUploadStatus, 0, protocol.FsUploadSessionArgs{Session: u.ID}, &st)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := checkRunnerStatus(u, st, -1); err != nil {
		return 0, err
	}
	return st.Offset, nil
}

func (s *Server) handleUploadList(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := s.store.ListUploadSessions(r.Context(), ws.ID, r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.UploadList{Uploads: []api.Upload{}}
	now := s.cfg.Clock.Now()
	for _, u := range list {
		if sha := r.URL.Query().Get("sha256"); (sha == "" || sha == u.SHA256) && now.Before(u.ExpiresAt) {
			out.Uploads = append(out.Uploads, s.uploadView(u))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleUploadAbort forgets a session and has its runner remove the staged bytes. A runner that
// cannot be reached drops them itself once the session's expiry passed, or with its sandbox.
func (s *Server) handleUploadAbort(w http.ResponseWriter, r *http.Request) {
	_, u, err := s.routeUpload(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.dropUpload(r.Context(), u); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// dropUpload removes a session's staged bytes (when its runner is reachable) and its record.
func (s *Server) dropUpload(ctx context.Context, u store.UploadSession) error {
	if c, err := s.runnerFor(ctx, u.WorkspaceID); err == nil {
		if err := c.Call(ctx, protocol.OpFsUploadAbort, 0, protocol.FsUploadSessionArgs{Session: u.ID}, nil); err != nil {
			if protocol.CodeOf(err) == protocol.CodeConflict {
				return err // a chunk is arriving; the caller may try again
			}
			s.log.Warn("abort upload on its runner", "upload", u.ID, "err", err)
		}
	}
	err := s.store.DeleteUploadSession(ctx, u.ID)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return nil
	}
	return err
}

// expireUploads removes the sessions whose expiry passed (gc), staged bytes included.
func (s *Server) expireUploads(ctx context.Context) (int, error) {
	list, err := s.store.ExpiredUploadSessions(ctx, s.cfg.Clock.Now(), expireUploadsBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, u := range list {
		if err := s.dropUpload(ctx, u); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
