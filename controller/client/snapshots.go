package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// CreateSnapshot captures the workspace into the blob store and returns the receipt.
func (c *Client) CreateSnapshot(ctx context.Context, workspace string) (api.Snapshot, error) {
	var snap api.Snapshot
	return snap, c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(workspace)+"/snapshots", nil, nil, "", &snap)
}

func (c *Client) ListSnapshots(ctx context.Context, workspace string) ([]api.Snapshot, error) {
	var out []api.Snapshot
	return out, c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(workspace)+"/snapshots", nil, nil, "", &out)
}

func (c *Client) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	var snap api.Snapshot
	return snap, c.do(ctx, http.MethodGet, "/v1/snapshots/"+url.PathEscape(id), nil, nil, "", &snap)
}

// RestoreSnapshot restores a snapshot onto a new workspace.
func (c *Client) RestoreSnapshot(ctx context.Context, id string, req api.RestoreRequest) (api.RestoreResult, error) {
	var res api.RestoreResult
	body, err := jsonBody(req)
	if err != nil {
		return res, err
	}
	return res, c.do(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(id)+"/restore", nil, body, "application/json", &res)
}

func (c *Client) VerifySnapshot(ctx context.Context, id string) (api.VerifyResult, error) {
	var res api.VerifyResult
	return res, c.do(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(id)+"/verify", nil, nil, "", &res)
}

// ExportSnapshot streams the plain .tar.zst of a snapshot into w. The controller cuts the
// stream off if the stored object does not match its receipt, which surfaces here as an error.
func (c *Client) ExportSnapshot(ctx context.Context, id string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/v1/snapshots/"+url.PathEscape(id)+"/archive", nil), nil)
	if err != nil {
		return 0, err
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, decodeError(resp)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, protocol.Errorf(protocol.CodeFailed, "export cut off after %d bytes: %v", n, err)
	}
	return n, nil
}
