package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// DefaultUploadChunk is the chunk size UploadFile sends: a cut costs at most this much again,
// and a 1 GiB file takes 32 requests.
const DefaultUploadChunk = 32 << 20

func uploadsPath(ws string) string { return "/v1/workspaces/" + url.PathEscape(ws) + "/uploads" }

func uploadPath(ws, id string) string { return uploadsPath(ws) + "/" + url.PathEscape(id) }

// CreateUpload starts a resumable upload session in workspace ws.
func (c *Client) CreateUpload(ctx context.Context, ws string, req api.UploadCreate) (api.Upload, error) {
	var u api.Upload
	return u, c.sendJSON(ctx, http.MethodPost, uploadsPath(ws), req, &u)
}

// GetUpload reads a session: Offset is how much its runner holds, where the next chunk goes.
func (c *Client) GetUpload(ctx context.Context, ws, id string) (api.Upload, error) {
	var u api.Upload
	return u, c.get(ctx, uploadPath(ws, id), nil, &u)
}

// ListUploads lists ws's live sessions, of path and with that sha256 when they are not empty.
func (c *Client) ListUploads(ctx context.Context, ws, path, sha256 string) ([]api.Upload, error) {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if sha256 != "" {
		q.Set("sha256", sha256)
	}
	var l api.UploadList
	return l.Uploads, c.get(ctx, uploadsPath(ws), q, &l)
}

// AbortUpload forgets a session and removes what its runner staged.
func (c *Client) AbortUpload(ctx context.Context, ws, id string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: uploadPath(ws, id)}, nil)
}

// PutUploadChunk sends n bytes of r as the chunk at offset off. A wrong offset is conflict:
// GetUpload says where to go on.
func (c *Client) PutUploadChunk(ctx context.Context, ws, id string, off int64, r io.Reader, n int64) (api.Upload, error) {
	var u api.Upload
	req := request{method: http.MethodPut, path: uploadPath(ws, id), query: url.Values{"offset": {strconv.FormatInt(off, 10)}},
		body: r, contentLength: n, contentType: "application/octet-stream"}
	if n == 0 {
		// No body at all: a PUT without one says Content-Length: 0; an empty reader would go
		// chunked, with no length the controller can check.
		req.body = nil
	}
	return u, c.do(ctx, req, &u)
}

// UploadOptions control UploadFile.
type UploadOptions struct {
	ChunkSize int64 // 0: DefaultUploadChunk
	// Progress is told the offset the upload resumes from, then every chunk's bytes as they go
	// (a chunk that fails is taken back with a negative count).
	Progress func(n int64)
}

// uploadPatience bounds how long UploadFile goes on after chunks that fail without progress.
const uploadPatience = 60 * time.Second

// UploadFile sends src's bytes to session id from the offset the runner holds on, one chunk at
// a time, until the file is published. A chunk that fails (a dropped connection, a restarted
// runner) is followed by a look at the session's offset and a retry from there, with back-off,
// as long as some progress was made within a minute; the context ending stops it at once.
func (c *Client) UploadFile(ctx context.Context, ws, id string, src io.ReaderAt, o UploadOptions) (api.Upload, error) {
	chunk := o.ChunkSize
	if chunk <= 0 || chunk > protocol.MaxUploadChunk {
		chunk = DefaultUploadChunk
	}
	tell := func(int64) {}
	if o.Progress != nil {
		tell = o.Progress
	}
	u, err := c.GetUpload(ctx, ws, id)
	if err != nil {
		return u, err
	}
	tell(u.Offset)
	lastProgress, backoff := time.Now(), 100*time.Millisecond
	for u.CompletedAt == nil {
		off := u.Offset
		n := min(chunk, u.Size-off)
		var sent int64
		body := progressReader{io.NewSectionReader(src, off, n), func(k int64) { sent += k; tell(k) }}
		next, err := c.PutUploadChunk(ctx, ws, id, off, body, n)
		if err == nil {
			u = next
			lastProgress, backoff = time.Now(), 100*time.Millisecond
			continue
		}
		tell(-sent)
		if ctx.Err() != nil {
			return u, ctx.Err()
		}
		switch protocol.CodeOf(err) {
		case protocol.CodeUnavailable, protocol.CodeConflict, protocol.CodeFailed, protocol.CodeTimeout, protocol.CodeInternal:
		default:
			return u, err // refused for good (corrupt, exists, not_found, …)
		}
		if time.Since(lastProgress) > uploadPatience {
			return u, err
		}
		if !sleepCtx(ctx, backoff) {
			return u, ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
		again, gerr := c.GetUpload(ctx, ws, id)
		if gerr != nil {
			if protocol.CodeOf(gerr) == protocol.CodeUnavailable {
				continue
			}
			return u, errors.Join(err, gerr)
		}
		if again.Offset != u.Offset {
			tell(again.Offset - u.Offset)
			lastProgress = time.Now()
		}
		u = again
	}
	return u, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
