package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/controller/api"
)

// CreateToken makes an API token; the answer carries its secret, which is never shown again.
func (c *Client) CreateToken(ctx context.Context, req api.CreateTokenRequest) (api.Token, error) {
	var t api.Token
	return t, c.sendJSON(ctx, http.MethodPost, "/v1/tokens", req, &t)
}

// ListTokens lists API tokens, revoked and expired ones included, without their secrets.
func (c *Client) ListTokens(ctx context.Context) ([]api.Token, error) {
	var out []api.Token
	return out, c.get(ctx, "/v1/tokens", nil, &out)
}

// RevokeToken revokes the live API token of that name.
func (c *Client) RevokeToken(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/tokens/" + url.PathEscape(name)}, nil)
}
