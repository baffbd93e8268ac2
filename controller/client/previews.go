package client

import (
	"context"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
)

// CreatePreview makes a preview link of a ready service, valid for ttl ("" for the default);
// the answer carries its URL, shown this once.
func (c *Client) CreatePreview(ctx context.Context, workspace, name, ttl string) (api.Preview, error) {
	var p api.Preview
	return p, c.sendJSON(ctx, http.MethodPost, servicePath(workspace, name)+"/previews", api.PreviewRequest{TTL: ttl}, &p)
}

// ListPreviews lists a service's preview links (without their URLs), dead ones included.
func (c *Client) ListPreviews(ctx context.Context, workspace, name string) ([]api.Preview, error) {
	var out []api.Preview
	return out, c.get(ctx, servicePath(workspace, name)+"/previews", nil, &out)
}

// RevokePreviews revokes every live preview link of a service and says how many there were.
func (c *Client) RevokePreviews(ctx context.Context, workspace, name string) (int, error) {
	var out api.PreviewsRevoked
	err := c.do(ctx, request{method: http.MethodDelete, path: servicePath(workspace, name) + "/previews"}, &out)
	return out.Revoked, err
}
