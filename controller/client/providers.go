package client

import (
	"context"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
)

// ListProviders lists the provider plugins the controller found, with their versions and
// config schemas.
func (c *Client) ListProviders(ctx context.Context) ([]api.ProviderInfo, error) {
	var out []api.ProviderInfo
	return out, c.do(ctx, http.MethodGet, "/v1/providers", nil, nil, "", &out)
}
