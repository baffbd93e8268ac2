package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/controller/api"
)

// RemoveSnapshot removes a receipt and returns it; its objects are freed by a later gc.
func (c *Client) RemoveSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	var snap api.Snapshot
	return snap, c.do(ctx, request{method: http.MethodDelete, path: "/v1/snapshots/" + url.PathEscape(id)}, &snap)
}

// PruneSnapshots removes the workspace's receipts req's policy does not keep.
func (c *Client) PruneSnapshots(ctx context.Context, workspace string, req api.PruneRequest) (api.PruneResult, error) {
	var res api.PruneResult
	// The same policy applied twice keeps and removes what it did once.
	return res, c.doJSON(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(workspace) + "/snapshots/prune", idempotent: true}, req, &res)
}

// PurgeWorkspace deletes a workspace (unless it already is) and removes all its receipts.
func (c *Client) PurgeWorkspace(ctx context.Context, id string) (api.PurgeResult, error) {
	var res api.PurgeResult
	return res, c.do(ctx, request{method: http.MethodDelete, path: "/v1/workspaces/" + url.PathEscape(id), query: url.Values{"purge": {"true"}}}, &res)
}

// StorageUsage reports the stored snapshot objects by who needs them.
func (c *Client) StorageUsage(ctx context.Context) (api.StorageUsage, error) {
	var u api.StorageUsage
	return u, c.get(ctx, "/v1/storage", nil, &u)
}
