package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// Headers of the files API.
const (
	// HeaderSHA256 is the SHA-256 of a whole-file read (an HTTP trailer, since it is known only
	// at the end) and, on a PUT, the content's expected SHA-256: a header, or a trailer from a
	// client that hashes as it sends.
	HeaderSHA256 = "X-Tether-Sha256"
	// HeaderSize is the file's full size, sent before a streamed whole-file body.
	HeaderSize = "X-Tether-Size"
)

// filePath is the workspace-relative path of a files URL; the bare collection is the root.
func filePath(r *http.Request) string {
	p := r.PathValue("path")
	if p == "" {
		return "."
	}
	return p
}

func (s *Server) handleFilesGet(w http.ResponseWriter, r *http.Request) {
	src, err := s.readSource(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	src.setHeaders(w.Header())
	if src.snap != nil {
		s.savedFilesGet(w, r, src)
		return
	}
	c := src.conn
	q := r.URL.Query()
	switch {
	case q.Has("list"):
		limit, _ := strconv.Atoi(q.Get("limit"))
		var page protocol.FsListResult
		if err := c.Call(r.Context(), protocol.OpFsList, 0, protocol.FsListArgs{Path: filePath(r), Cursor: q.Get("cursor"), Limit: limit}, &page); err != nil {
			writeError(w, err)
			return
		}
		page.ReadSource = src.info()
		writeJSON(w, http.StatusOK, page)
	case q.Has("stat"):
		var fi protocol.FileInfo
		if err := c.Call(r.Context(), protocol.OpFsStat, 0, protocol.FsPathArgs{Path: filePath(r)}, &fi); err != nil {
			writeError(w, err)
			return
		}
		fi.ReadSource = src.info()
		writeJSON(w, http.StatusOK, fi)
	default:
		s.readFile(w, r, c)
	}
}

// parseRange understands one "bytes=" range; several ranges are answered with the whole file,
// which RFC 9110 allows.
func parseRange(h string) (protocol.FsReadArgs, bool, error) {
	args := protocol.FsReadArgs{Length: -1}
	spec, ok := strings.CutPrefix(h, "bytes=")
	if h == "" || !ok || strings.Contains(spec, ",") {
		return args, false, nil
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return args, false, protocol.Errorf(protocol.CodeInvalidRange, "bad Range %q", h)
	}
	if first == "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n <= 0 {
			return args, false, protocol.Errorf(protocol.CodeInvalidRange, "bad Range %q", h)
		}
		args.Suffix = n
		return args, true, nil
	}
	off, err := strconv.ParseInt(first, 10, 64)
	if err != nil || off < 0 {
		return args, false, protocol.Errorf(protocol.CodeInvalidRange, "bad Range %q", h)
	}
	args.Offset = off
	if last != "" {
		end, err := strconv.ParseInt(last, 10, 64)
		if err != nil || end < off {
			return args, false, protocol.Errorf(protocol.CodeInvalidRange, "bad Range %q", h)
		}
		args.Length = end - off + 1
	}
	return args, true, nil
}

// readFile streams a file (or one range of it). A whole-file read goes chunked with its SHA-256
// as a trailer; if the runner fails mid-way, the response is cut off rather than ended, so no
// client can mistake a partial body for the file.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c *hub.Conn) {
	args, ranged, err := parseRange(r.Header.Get("Range"))
	if err != nil {
		writeError(w, err)
		return
	}
	args.Path = filePath(r)
	st, err := c.Open(protocol.OpFsRead, "", 0, args)
	if err != nil {
		writeError(w, err)
		return
	}
	defer st.Close()
	stop := context.AfterFunc(r.Context(), func() { st.Close() })
	defer stop()
	tr, err := hub.ReadTrailer(st)
	if err != nil {
		writeError(w, err)
		return
	}
	var reply protocol.FsReadReply
	if err := hub.DecodeResult(tr, &reply); err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	w.WriteHeader(writeReadHeaders(w, reply, ranged))
	body := protocol.NewBodyReader(st)
	if _, err := io.Copy(w, body); err != nil {
		s.log.Warn("file read cut off", "path", args.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	_ = st.SetReadDeadline(time.Now().Add(hub.TrailerWait))
	final, err := hub.ReadTrailer(st)
	if err == nil {
		err = final.Err()
	}
	if err != nil {
		s.log.Warn("file read failed after its body", "path", args.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if !ranged {
		h.Set(HeaderSHA256, body.Result.SHA256)
	}
}

// writeReadHeaders sets the headers of a file read about to send reply's bytes and returns the
// status to send them with: live and saved reads answer alike.
func writeReadHeaders(w http.ResponseWriter, reply protocol.FsReadReply, ranged bool) int {
	h := w.Header()
	// A workspace's file is the agent's bytes: never a page of the controller's origin, however
	// a browser came to load it (sniffed, rendered, or running scripts with the console's
	// session).
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Accept-Ranges", "bytes")
	h.Set("Last-Modified", reply.Info.MTime.UTC().Format(http.TimeFormat))
	h.Set(HeaderSize, strconv.FormatInt(reply.Info.Size, 10))
	if !ranged {
		h.Set("Trailer", HeaderSHA256)
		return http.StatusOK
	}
	h.Set("Content-Length", strconv.FormatInt(reply.Length, 10))
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", reply.Offset, reply.Offset+reply.Length-1, reply.Info.Size))
	if reply.Length == 0 {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", reply.Info.Size))
	}
	return http.StatusPartialContent
}

func (s *Server) handleFilesPut(w http.ResponseWriter, r *http.Request) {
	_, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	args := protocol.FsWriteArgs{Path: filePath(r), Replace: q.Get("replace") == "true", IfSHA256: q.Get("if_sha256"),
		SHA256: r.Header.Get(HeaderSHA256), MaxBytes: s.cfg.MaxFileSize}
	if m := q.Get("mode"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "mode %q: want octal permission bits like 0644", m))
			return
		}
		args.Mode = uint32(mode)
	}
	if s.cfg.MaxFileSize > 0 && r.ContentLength > s.cfg.MaxFileSize {
		writeError(w, protocol.Errorf(protocol.CodeTooLarge, "%d bytes exceed the file size limit of %d", r.ContentLength, s.cfg.MaxFileSize))
		return
	}
	src, claim, err := trailingDigest(r, c, &args)
	if err != nil {
		writeError(w, err)
		return
	}
	var res protocol.FsWriteResult
	if err := c.CallWithBodyClaim(r.Context(), protocol.OpFsWrite, epoch, args, src, claim, &res); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

// trailingDigest sets up a put whose SHA-256 follows its bytes, as the trailer X-Tether-Sha256
// of a chunked body (a client that hashes as it sends): it returns the body to relay and the
// claim that ends it. A runner that advertises the capability checks the digest itself before
// publishing (one hash on its side, as for a header); for one that does not, the controller
// hashes what it relays and aborts the body on a mismatch, so the runner publishes nothing
// either way. A put without the trailer gets r.Body and no claim.
func trailingDigest(r *http.Request, c *hub.Conn, args *protocol.FsWriteArgs) (io.Reader, func() (string, error), error) {
	// Go's server moves a chunked body's Trailer header into r.Trailer; on a body with a
	// Content-Length it leaves the header and reads no trailers, so such a put would be
	// published with its declared digest never looked at.
	if _, ok := r.Trailer[HeaderSHA256]; !ok {
		for _, v := range r.Header.Values("Trailer") {
			for _, name := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(name), HeaderSHA256) {
					return nil, nil, protocol.Errorf(protocol.CodeInvalidArgument, "a trailing %s needs a chunked body (no Content-Length)", HeaderSHA256)
				}
			}
		}
		return r.Body, nil, nil
	}
	if args.SHA256 != "" {
		return nil, nil, protocol.Errorf(protocol.CodeInvalidArgument, "%s comes as a header or as a trailer, not both", HeaderSHA256)
	}
	sent := func() (string, error) { // r.Body was read to its end: the trailer is in
		sum := strings.ToLower(r.Trailer.Get(HeaderSHA256))
		if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size {
			return "", protocol.Errorf(protocol.CodeInvalidArgument, "trailer %s %q: want the content's SHA-256 in hex", HeaderSHA256, sum)
		}
		return sum, nil
	}
	if slices.Contains(c.Hello.Capabilities, protocol.CapWriteSHA256Trailer) {
		args.SHA256Trailer = true
		return r.Body, sent, nil
	}
	h := sha256.New()
	return io.TeeReader(r.Body, h), func() (string, error) {
		want, err := sent()
		if err != nil {
			return "", err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return "", protocol.Errorf(protocol.CodeFailed, "content hashes to %s, the sender said %s", got, want)
		}
		return "", nil // checked here: the runner is told no digest
	}, nil
}

func (s *Server) handleFilesDelete(w http.ResponseWriter, r *http.Request) {
	_, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	args := protocol.FsPathArgs{Path: filePath(r), Recursive: r.URL.Query().Get("recursive") == "true"}
	if err := c.Call(r.Context(), protocol.OpFsRemove, epoch, args, nil); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleFilesPost carries the operations that are neither reads nor writes of content:
// ?op=mkdir[&parents=true][&mode=0755], ?op=rename&to=PATH[&replace=true], ?op=chmod&mode=0644.
func (s *Server) handleFilesPost(w http.ResponseWriter, r *http.Request) {
	_, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	var mode uint64
	if m := q.Get("mode"); m != "" {
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil {
			writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "mode %q: want octal permission bits like 0755", m))
			return
		}
	}
	var fi protocol.FileInfo
	switch op := q.Get("op"); op {
	case "mkdir":
		err = c.Call(r.Context(), protocol.OpFsMkdir, epoch, protocol.FsPathArgs{Path: filePath(r), Parents: q.Get("parents") == "true", Mode: uint32(mode)}, &fi)
	case "rename":
		if q.Get("to") == "" {
			err = protocol.Errorf(protocol.CodeInvalidArgument, "rename needs ?to=PATH")
			break
		}
		err = c.Call(r.Context(), protocol.OpFsRename, epoch, protocol.FsRenameArgs{From: filePath(r), To: q.Get("to"), Replace: q.Get("replace") == "true"}, &fi)
	case "chmod":
		if q.Get("mode") == "" {
			err = protocol.Errorf(protocol.CodeInvalidArgument, "chmod needs ?mode=OCTAL")
			break
		}
		err = c.Call(r.Context(), protocol.OpFsChmod, epoch, protocol.FsPathArgs{Path: filePath(r), Mode: uint32(mode)}, &fi)
	default:
		err = protocol.Errorf(protocol.CodeInvalidArgument, "unknown files operation %q (want mkdir, rename or chmod)", op)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}
