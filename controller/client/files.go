package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Files API headers (see controller.HeaderSHA256 and controller.HeaderSize).
const (
	headerSHA256     = "X-Tether-Sha256"
	headerSize       = "X-Tether-Size"
	headerSource     = "X-Tether-Source"
	headerAllocation = "X-Tether-Allocation"
	headerSnapshot   = "X-Tether-Snapshot"
	headerSavedAt    = "X-Tether-Saved-At"
)

// readSource reads where a files API answer came from off its headers.
func readSource(h http.Header) protocol.ReadSource {
	src := protocol.ReadSource{Source: h.Get(headerSource), AllocationID: h.Get(headerAllocation), SnapshotID: h.Get(headerSnapshot)}
	if at, err := time.Parse(time.RFC3339Nano, h.Get(headerSavedAt)); err == nil {
		src.SavedAt = &at
	}
	return src
}

// filesPath escapes the whole workspace path as one segment, so no HTTP layer cleans or
// redirects it before the runner's guard judges it. PathEscape leaves dots alone, and a
// segment that is exactly "." or ".." is a dot segment the server's router cleans away: ".."
// would redirect .../files/.. to the workspace itself, and a client following that redirect
// would run the request there (DELETE removing the workspace). Encoded, it reaches the guard.
func filesPath(id, p string) string {
	seg := url.PathEscape(p)
	if seg == "." || seg == ".." {
		seg = strings.ReplaceAll(seg, ".", "%2E")
	}
	return "/v1/workspaces/" + url.PathEscape(id) + "/files/" + seg
}

// ListFiles returns one page of a directory listing. The page says where it was read from
// (ReadSource): the live allocation, or a closed workspace's last saved copy.
func (c *Client) ListFiles(ctx context.Context, id, dir, cursor string, limit int) (protocol.FsListResult, error) {
	var page protocol.FsListResult
	q := url.Values{"list": {""}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return page, c.get(ctx, filesPath(id, dir), q, &page)
}

// StatFile describes one path without following a symlink, saying where it was read from.
func (c *Client) StatFile(ctx context.Context, id, p string) (protocol.FileInfo, error) {
	var fi protocol.FileInfo
	return fi, c.get(ctx, filesPath(id, p), url.Values{"stat": {""}}, &fi)
}

// ReadOptions select part of a file; the zero value reads all of it.
type ReadOptions struct {
	Offset int64
	Length int64 // 0: to the end
	// Progress, when set, is told the file's size once and then every chunk's length.
	Progress func(total, n int64)
}

// ReadResult describes a completed read.
type ReadResult struct {
	Bytes  int64
	Size   int64  // the whole file's size
	SHA256 string // of the bytes read; for a whole-file read, verified against the controller's
	// ReadSource says where the bytes came from: Source "live" with the AllocationID read, or
	// "saved" with the SnapshotID and SavedAt of the receipt read (a closed workspace). It is
	// set as soon as the controller answered, also when the read then failed.
	protocol.ReadSource
}

// ReadFile streams a file (or a range) into w. A whole-file read is verified: its byte count
// and SHA-256 must match what the controller sent (the runner's, or the saved copy's manifest),
// else the read fails.
func (c *Client) ReadFile(ctx context.Context, id, p string, w io.Writer, o ReadOptions) (ReadResult, error) {
	r := request{method: http.MethodGet, path: filesPath(id, p)}
	ranged := o.Offset > 0 || o.Length > 0
	if ranged {
		end := ""
		if o.Length > 0 {
			end = strconv.FormatInt(o.Offset+o.Length-1, 10)
		}
		r.header = http.Header{"Range": {fmt.Sprintf("bytes=%d-%s", o.Offset, end)}}
	}
	resp, err := c.roundTrip(ctx, r)
	if err != nil {
		return ReadResult{}, err
	}
	defer resp.Body.Close()
	src := readSource(resp.Header)
	size, _ := strconv.ParseInt(resp.Header.Get(headerSize), 10, 64)
	if o.Progress != nil {
		o.Progress(size, 0)
		w = progressWriter{w, func(n int64) { o.Progress(size, n) }}
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return ReadResult{Bytes: n, ReadSource: src}, protocol.Errorf(protocol.CodeFailed, "read %s cut off after %d bytes: %v", p, n, err)
	}
	res := ReadResult{Bytes: n, Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), ReadSource: src}
	if !ranged {
		want := resp.Trailer.Get(headerSHA256)
		if want == "" || want != res.SHA256 || n != size {
			return res, protocol.Errorf(protocol.CodeFailed, "read %s: received %d bytes with sha256 %s; the controller sent %d bytes with sha256 %q",
				p, n, res.SHA256, size, want)
		}
	}
	return res, nil
}

type progressWriter struct {
	w    io.Writer
	tell func(int64)
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.tell(int64(n))
	return n, err
}

type progressReader struct {
	r    io.Reader
	tell func(int64)
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.tell(int64(n))
	return n, err
}

// WriteOptions control WriteFile.
type WriteOptions struct {
	Replace  bool
	IfSHA256 string // replace only this current content
	Mode     uint32 // 0: 0644
	SHA256   string // the content's SHA-256, checked by the runner before publishing
	// HashAsSent hashes the content as it is sent and sends the digest after it (an HTTP
	// trailer), checked by the runner before publishing like SHA256: end-to-end checking without
	// reading the source twice. Ignored when SHA256 is set.
	HashAsSent bool
	Size       int64 // when known (> 0), sent as Content-Length
	Progress   func(n int64)
}

// WriteFile streams r into the file p, published atomically by the runner.
func (c *Client) WriteFile(ctx context.Context, id, p string, r io.Reader, o WriteOptions) (protocol.FsWriteResult, error) {
	var res protocol.FsWriteResult
	q := url.Values{}
	if o.Replace {
		q.Set("replace", "true")
	}
	if o.IfSHA256 != "" {
		q.Set("if_sha256", o.IfSHA256)
	}
	if o.Mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(o.Mode), 8))
	}
	if o.Progress != nil {
		r = progressReader{r, o.Progress}
	}
	req := request{method: http.MethodPut, path: filesPath(id, p), query: q,
		body: r, contentLength: o.Size, contentType: "application/octet-stream"}
	var sent atomic.Pointer[string]
	switch {
	case o.SHA256 != "":
		req.header = http.Header{headerSHA256: {o.SHA256}}
	case o.HashAsSent:
		req.sha256Trailer, req.sentSHA256 = true, &sent
	}
	if err := c.do(ctx, req, &res); err != nil {
		return res, err
	}
	if o.HashAsSent && o.SHA256 == "" {
		// End to end: whatever path the bytes took, what was published is what was sent.
		if s := sent.Load(); s == nil || *s != res.SHA256 {
			return res, protocol.Errorf(protocol.CodeFailed, "%s was published with sha256 %s, not that of the bytes sent", p, res.SHA256)
		}
	}
	return res, nil
}

// Mkdir creates a directory (with parents: also missing parents, and no error if it exists).
func (c *Client) Mkdir(ctx context.Context, id, p string, parents bool, mode uint32) (protocol.FileInfo, error) {
	q := url.Values{"op": {"mkdir"}}
	if parents {
		q.Set("parents", "true")
	}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	var fi protocol.FileInfo
	// With parents an existing directory is no error, so a repeat changes nothing.
	return fi, c.do(ctx, request{method: http.MethodPost, path: filesPath(id, p), query: q, idempotent: parents}, &fi)
}

// Remove removes a file, link or empty directory; recursive removes a directory tree without
// following links.
func (c *Client) Remove(ctx context.Context, id, p string, recursive bool) error {
	q := url.Values{}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, request{method: http.MethodDelete, path: filesPath(id, p), query: q}, nil)
}

// Rename moves from to to; an existing destination is an error unless replace.
func (c *Client) Rename(ctx context.Context, id, from, to string, replace bool) (protocol.FileInfo, error) {
	q := url.Values{"op": {"rename"}, "to": {to}}
	if replace {
		q.Set("replace", "true")
	}
	var fi protocol.FileInfo
	return fi, c.do(ctx, request{method: http.MethodPost, path: filesPath(id, from), query: q}, &fi)
}

// Chmod sets permission bits.
func (c *Client) Chmod(ctx context.Context, id, p string, mode uint32) (protocol.FileInfo, error) {
	q := url.Values{"op": {"chmod"}, "mode": {strconv.FormatUint(uint64(mode), 8)}}
	var fi protocol.FileInfo
	// Setting the same bits again is the same as once.
	return fi, c.do(ctx, request{method: http.MethodPost, path: filesPath(id, p), query: q, idempotent: true}, &fi)
}
