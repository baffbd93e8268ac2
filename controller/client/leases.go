package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/controller/api"
)

func leasePath(id string) string { return "/v1/workspaces/" + url.PathEscape(id) + "/lease" }

// AcquireLease takes the workspace's writer lease (waiting up to req.Wait for a held one).
func (c *Client) AcquireLease(ctx context.Context, id string, req api.LeaseRequest) (api.Lease, error) {
	var l api.Lease
	return l, c.sendJSON(ctx, http.MethodPost, leasePath(id), req, &l)
}

// RenewLease extends the lease of epoch req.Epoch.
func (c *Client) RenewLease(ctx context.Context, id string, req api.LeaseRequest) (api.Lease, error) {
	var l api.Lease
	return l, c.sendJSON(ctx, http.MethodPut, leasePath(id), req, &l)
}

func (c *Client) ReleaseLease(ctx context.Context, id string, epoch uint64) error {
	return c.do(ctx, request{method: http.MethodDelete, path: leasePath(id), query: url.Values{"epoch": {strconv.FormatUint(epoch, 10)}}}, nil)
}

func (c *Client) GetLease(ctx context.Context, id string) (api.Lease, error) {
	var l api.Lease
	return l, c.get(ctx, leasePath(id), nil, &l)
}
