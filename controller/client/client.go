package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// Client talks to one controller.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	epoch uint64 // the writer epoch mutating calls claim; 0: none
	wake  bool   // ask that a stopped or closed workspace be woken for each call (headerWake)
	retry retryPolicy
}

// headerEpoch is controller.HeaderEpoch.
const headerEpoch = "X-Tether-Epoch"

// headerIdempotencyKey on a POST says its sender vouches that a repeat does no harm, so it is
// retried like an idempotent call (net/http's own transport reads it the same way). No call of
// this client sets one yet: the controller does not record answers by key.
const headerIdempotencyKey = "Idempotency-Key"

// headerWake is controller.HeaderWake.
const headerWake = "X-Tether-Wake"

// WithWake returns a client whose calls that use a workspace (exec, files, services) start a
// stopped one or reopen a closed one first (tether … --wake).
func (c *Client) WithWake() *Client {
	cc := *c
	cc.wake = true
	return &cc
}

// WithEpoch returns a client whose calls claim the writer epoch e (from a lease).
func (c *Client) WithEpoch(e uint64) *Client {
	cc := *c
	cc.epoch = e
	return &cc
}

func (c *Client) authorize(req *http.Request) {
	req.Header.Set("Authorization", protocol.Bearer(c.token))
	if c.epoch > 0 {
		req.Header.Set(headerEpoch, strconv.FormatUint(c.epoch, 10))
	}
	if c.wake {
		req.Header.Set(headerWake, "true")
	}
}

// New makes a client for the controller at addr (http://host:port, or host:port; see ParseAddr) using token (the operator's,
// or an API token). It retries for DefaultRetryFor; see WithRetryFor.
func New(addr, token string) (*Client, error) {
	u, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	// Redirects are refused: a router that cleaned a workspace path ("a/.." → "a") would
	// otherwise send the request to a different resource than the one named.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Client{base: u, token: token, http: hc, retry: retryPolicy{For: DefaultRetryFor, clock: clockwork.NewRealClock()}}, nil
}

// Addr is the controller's base URL.
func (c *Client) Addr() string { return c.base.String() }

// url joins the base and an already escaped path.
func (c *Client) url(escapedPath string, q url.Values) string {
	s := c.base.String() + escapedPath
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// request is one call of the controller's REST API.
type request struct {
	method        string
	path          string      // already escaped
	query         url.Values  // nil for none
	header        http.Header // more headers (Range, a digest); nil for none
	body          io.Reader   // nil for none
	contentLength int64       // the body's length when known (> 0)
	contentType   string      // the body's; "" sets no Content-Type
	// sha256Trailer sends the body's SHA-256, computed as it is sent, as the trailer
	// X-Tether-Sha256 (the body then goes chunked, without a Content-Length).
	sha256Trailer bool
	// sentSHA256 gets that digest once the body was sent whole, from the transport's routine.
	sentSHA256 *atomic.Pointer[string]
	// idempotent marks a POST that the controller may perform twice with the same effect as
	// once, so a client that cannot tell whether the first one arrived may send it again. GET,
	// HEAD, PUT and DELETE are idempotent by definition and need no mark.
	idempotent bool
}

// mayRepeat says whether r may be sent again after it may have reached the controller.
func (r request) mayRepeat() bool {
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
		return true
	}
	return r.idempotent || r.header.Get(headerIdempotencyKey) != ""
}

// newRequest makes r an HTTP request that carries the client's credentials (and epoch), with
// body as its body.
func (c *Client) newRequest(ctx context.Context, r request, body io.Reader) (*http.Request, error) {
	var hashed *trailerHash
	if r.sha256Trailer && body != nil {
		hashed = &trailerHash{r: body, h: sha256.New()}
		body = hashed
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path, r.query), body)
	if err != nil {
		return nil, err
	}
	if hashed != nil {
		// Each attempt hashes its own copy of the body; the transport sends the trailer once
		// the body has returned EOF, which is when the digest is set.
		req.Trailer = http.Header{headerSHA256: nil}
		hashed.done = func(sum string) {
			req.Trailer.Set(headerSHA256, sum)
			if r.sentSHA256 != nil {
				r.sentSHA256.Store(&sum)
			}
		}
		r.contentLength = 0 // a trailer needs a chunked body
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	c.authorize(req)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.contentLength > 0 {
		req.ContentLength = r.contentLength
	}
	return req, nil
}

// roundTrip performs r and returns the controller's 2xx response, whose body the caller closes,
// or the typed error. It is the one place requests are sent, so the retry policy applies to every
// call: r is sent again, with backoff, while the controller is unavailable or unreachable and the
// policy allows (see retryPolicy).
func (c *Client) roundTrip(ctx context.Context, r request) (*http.Response, error) {
	body := newReplayBody(r.body, r.contentLength)
	var resp *http.Response
	err := c.withRetries(ctx, func() (bool, error) {
		req, err := c.newRequest(ctx, r, body.attempt())
		if err != nil {
			return false, err
		}
		resp, err = c.http.Do(req)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			again := retryableConnError(err, r.mayRepeat()) && body.replayable()
			return again, protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, unwrapURLError(err))
		case resp.StatusCode/100 != 2:
			err := decodeError(resp)
			resp.Body.Close()
			again := protocol.CodeOf(err) == protocol.CodeUnavailable && r.mayRepeat() && body.replayable()
			return again, err
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// do performs r and decodes a JSON answer into out (when not nil), or the typed error.
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.roundTrip(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", r.method, r.path, err)
	}
	return nil
}

// get performs a GET of path with the query q (nil for none), like do.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, request{method: http.MethodGet, path: path, query: q}, out)
}

// sendJSON performs method on path with in, encoded as JSON, as the body, like do.
func (c *Client) sendJSON(ctx context.Context, method, path string, in, out any) error {
	return c.doJSON(ctx, request{method: method, path: path}, in, out)
}

// doJSON performs r with in, encoded as JSON, as its body, like do.
func (c *Client) doJSON(ctx context.Context, r request, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	r.body, r.contentType = bytes.NewReader(b), "application/json"
	return c.do(ctx, r, out)
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// decodeError is the typed error of a refusal: the controller's own (its JSON error body), or,
// for an answer without one, an error by status.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		return &eb.Error
	}
	code := protocol.CodeInternal
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		// Not a controller's answer but that of a proxy in front of the controllers (a load
		// balancer whose controller was killed or restarted under the request, or has none up):
		// like a connection that dropped before any answer, so the retry policy applies (an
		// idempotent call is sent again, and lands on a controller that is up).
		code = protocol.CodeUnavailable
	}
	return protocol.Errorf(code, "controller answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// CreateWorkspace creates a workspace and waits until it is ready or failed.
func (c *Client) CreateWorkspace(ctx context.Context, req api.CreateWorkspaceRequest) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.sendJSON(ctx, http.MethodPost, "/v1/workspaces", req, &ws)
}

func (c *Client) ListWorkspaces(ctx context.Context, all bool) ([]api.Workspace, error) {
	var out []api.Workspace
	q := url.Values{}
	if all {
		q.Set("all", "true")
	}
	return out, c.get(ctx, "/v1/workspaces", q, &out)
}

func (c *Client) GetWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.get(ctx, "/v1/workspaces/"+url.PathEscape(id), nil, &ws)
}

func (c *Client) DeleteWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.do(ctx, request{method: http.MethodDelete, path: "/v1/workspaces/" + url.PathEscape(id)}, &ws)
}

// ImportTree streams a tar (optionally zstd-compressed) into dir of the workspace.
func (c *Client) ImportTree(ctx context.Context, id, dir string, tarStream io.Reader) (api.TreeImportResult, error) {
	var res api.TreeImportResult
	q := url.Values{}
	if dir != "" {
		q.Set("dir", dir)
	}
	return res, c.do(ctx, request{method: http.MethodPut, path: "/v1/workspaces/" + url.PathEscape(id) + "/tree",
		query: q, body: tarStream, contentType: "application/x-tar"}, &res)
}

func (c *Client) ListRuns(ctx context.Context, id string) ([]api.Run, error) {
	var out []api.Run
	return out, c.get(ctx, "/v1/workspaces/"+url.PathEscape(id)+"/runs", nil, &out)
}

// CloseWorkspace closes (or, with req.Check, only checks) a workspace.
func (c *Client) CloseWorkspace(ctx context.Context, id string, req api.CloseRequest, out any) error {
	// A check changes nothing, so it may be repeated; a close may not (a repeat of one that
	// happened is refused: the workspace is closed).
	return c.doJSON(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(id) + "/close", idempotent: req.Check}, req, out)
}

// ReopenWorkspace restores a closed workspace onto a new allocation.
func (c *Client) ReopenWorkspace(ctx context.Context, id string, req api.ReopenRequest) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/reopen", req, &ws)
}

// RecoverWorkspace rebuilds a lost workspace on a new allocation from one of its receipts.
func (c *Client) RecoverWorkspace(ctx context.Context, id string, req api.RecoverRequest) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/recover", req, &ws)
}

// StopWorkspace stops a workspace's sandbox and keeps it, unsaved work included. A repeat is
// safe (a stopped workspace is answered as it is), so it is retried like a read.
func (c *Client) StopWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.do(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(id) + "/stop", idempotent: true}, &ws)
}

// StartWorkspace starts a stopped workspace's kept sandbox; a repeat is safe, like StopWorkspace.
func (c *Client) StartWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.do(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(id) + "/start", idempotent: true}, &ws)
}

func (c *Client) ListEvents(ctx context.Context, id string) ([]api.Event, error) {
	var out []api.Event
	return out, c.get(ctx, "/v1/workspaces/"+url.PathEscape(id)+"/events", nil, &out)
}

func (c *Client) GetRun(ctx context.Context, id string) (api.Run, error) {
	var r api.Run
	return r, c.get(ctx, "/v1/runs/"+url.PathEscape(id), nil, &r)
}

// ExportFiles copies the workspace's files through its provider into dest on the controller's
// host.
func (c *Client) ExportFiles(ctx context.Context, id string, req api.ExportRequest) (api.ExportResult, error) {
	var res api.ExportResult
	return res, c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/export", req, &res)
}

// UpdateWorkspace changes a workspace's settings (PATCH; repeating it changes nothing more).
func (c *Client) UpdateWorkspace(ctx context.Context, id string, req api.UpdateWorkspaceRequest) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.doJSON(ctx, request{method: http.MethodPatch, path: "/v1/workspaces/" + url.PathEscape(id), idempotent: true}, req, &ws)
}

// ForkWorkspace makes req.Count workspaces from one receipt of the workspace, all or nothing.
func (c *Client) ForkWorkspace(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	var res api.ForkResult
	return res, c.sendJSON(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/fork", req, &res)
}

// trailerHash hashes what is read through it and hands over the digest at EOF.
type trailerHash struct {
	r    io.Reader
	h    hash.Hash
	done func(sum string)
}

func (t *trailerHash) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	if err == io.EOF && t.done != nil {
		t.done(hex.EncodeToString(t.h.Sum(nil)))
		t.done = nil
	}
	return n, err
}
