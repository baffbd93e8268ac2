// Package client is the Go client of the controller's REST API; the CLI is built on it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// Client talks to one controller.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	epoch uint64 // the writer epoch mutating calls claim; 0: none
}

// headerEpoch is controller.HeaderEpoch.
const headerEpoch = "X-Tether-Epoch"

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
}

// New makes a client for the controller at addr (http://host:port) using the operator token.
func New(addr, token string) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(addr, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "controller address %q must look like http://host:port", addr)
	}
	// Redirects are refused: a router that cleaned a workspace path ("a/.." → "a") would
	// otherwise send the request to a different resource than the one named.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Client{base: u, token: token, http: hc}, nil
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

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), body)
	if err != nil {
		return err
	}
	c.authorize(req)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return c.send(ctx, req, out)
}

// send performs req and decodes a JSON answer into out (when not nil), or the typed error.
func (c *Client) send(ctx context.Context, req *http.Request, out any) error {
	method, path := req.Method, req.URL.Path
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		return &eb.Error
	}
	return protocol.Errorf(protocol.CodeInternal, "controller answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
}

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}

// CreateWorkspace creates a workspace and waits until it is ready or failed.
func (c *Client) CreateWorkspace(ctx context.Context, req api.CreateWorkspaceRequest) (api.Workspace, error) {
	var ws api.Workspace
	body, err := jsonBody(req)
	if err != nil {
		return ws, err
	}
	return ws, c.do(ctx, http.MethodPost, "/v1/workspaces", nil, body, "application/json", &ws)
}

func (c *Client) ListWorkspaces(ctx context.Context, all bool) ([]api.Workspace, error) {
	var out []api.Workspace
	q := url.Values{}
	if all {
		q.Set("all", "true")
	}
	return out, c.do(ctx, http.MethodGet, "/v1/workspaces", q, nil, "", &out)
}

func (c *Client) GetWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(id), nil, nil, "", &ws)
}

func (c *Client) DeleteWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	var ws api.Workspace
	return ws, c.do(ctx, http.MethodDelete, "/v1/workspaces/"+url.PathEscape(id), nil, nil, "", &ws)
}

// ImportTree streams a tar (optionally zstd-compressed) into dir of the workspace.
func (c *Client) ImportTree(ctx context.Context, id, dir string, tarStream io.Reader) (api.TreeImportResult, error) {
	var res api.TreeImportResult
	q := url.Values{}
	if dir != "" {
		q.Set("dir", dir)
	}
	return res, c.do(ctx, http.MethodPut, "/v1/workspaces/"+url.PathEscape(id)+"/tree", q, tarStream, "application/x-tar", &res)
}

func (c *Client) ListRuns(ctx context.Context, id string) ([]api.Run, error) {
	var out []api.Run
	return out, c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(id)+"/runs", nil, nil, "", &out)
}

// CloseWorkspace closes (or, with req.Check, only checks) a workspace.
func (c *Client) CloseWorkspace(ctx context.Context, id string, req api.CloseRequest, out any) error {
	body, err := jsonBody(req)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/close", nil, body, "application/json", out)
}

// ReopenWorkspace restores a closed workspace onto a new allocation.
func (c *Client) ReopenWorkspace(ctx context.Context, id string, req api.ReopenRequest) (api.Workspace, error) {
	var ws api.Workspace
	body, err := jsonBody(req)
	if err != nil {
		return ws, err
	}
	return ws, c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/reopen", nil, body, "application/json", &ws)
}

func (c *Client) ListEvents(ctx context.Context, id string) ([]api.Event, error) {
	var out []api.Event
	return out, c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(id)+"/events", nil, nil, "", &out)
}

func (c *Client) GetRun(ctx context.Context, id string) (api.Run, error) {
	var r api.Run
	return r, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, "", &r)
}

// ExportFiles copies the workspace's files through its provider into dest on the controller's
// host.
func (c *Client) ExportFiles(ctx context.Context, id string, req api.ExportRequest) (api.ExportResult, error) {
	var res api.ExportResult
	body, err := jsonBody(req)
	if err != nil {
		return res, err
	}
	return res, c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/export", nil, body, "application/json", &res)
}
