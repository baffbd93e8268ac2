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
	return c.CreateSnapshotWith(ctx, workspace, api.CaptureOptions{})
}

// CreateSnapshotWith captures with options (Full: every file read and stored again).
func (c *Client) CreateSnapshotWith(ctx context.Context, workspace string, opts api.CaptureOptions) (api.Snapshot, error) {
	var snap api.Snapshot
	var q url.Values
	if opts.Full {
		q = url.Values{"full": {"true"}}
	}
	return snap, c.do(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(workspace) + "/snapshots", query: q}, &snap)
}

func (c *Client) ListSnapshots(ctx context.Context, workspace string) ([]api.Snapshot, error) {
	var out []api.Snapshot
	return out, c.get(ctx, "/v1/workspaces/"+url.PathEscape(workspace)+"/snapshots", nil, &out)
}

func (c *Client) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	var snap api.Snapshot
	return snap, c.get(ctx, "/v1/snapshots/"+url.PathEscape(id), nil, &snap)
}

// RestoreSnapshot restores a snapshot onto a new workspace.
func (c *Client) RestoreSnapshot(ctx context.Context, id string, req api.RestoreRequest) (api.RestoreResult, error) {
	var res api.RestoreResult
	return res, c.sendJSON(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(id)+"/restore", req, &res)
}

func (c *Client) VerifySnapshot(ctx context.Context, id string) (api.VerifyResult, error) {
	var res api.VerifyResult
	// Verifying reads the object and changes nothing.
	return res, c.do(ctx, request{method: http.MethodPost, path: "/v1/snapshots/" + url.PathEscape(id) + "/verify", idempotent: true}, &res)
}

// ExportSnapshot streams the plain .tar.zst of a snapshot into w. The controller cuts the
// stream off if the stored object does not match its receipt, which surfaces here as an error.
func (c *Client) ExportSnapshot(ctx context.Context, id string, w io.Writer) (int64, error) {
	resp, err := c.roundTrip(ctx, request{method: http.MethodGet, path: "/v1/snapshots/" + url.PathEscape(id) + "/archive"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, protocol.Errorf(protocol.CodeFailed, "export cut off after %d bytes: %v", n, err)
	}
	return n, nil
}
