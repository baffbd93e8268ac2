package client

import (
	"context"

	"github.com/tetherhq/tether/controller/api"
)

// ListProviders lists the provider plugins the controller found, with their versions and
// config schemas.
func (c *Client) ListProviders(ctx context.Context) ([]api.ProviderInfo, error) {
	var out []api.ProviderInfo
	return out, c.get(ctx, "/v1/providers", nil, &out)
}
