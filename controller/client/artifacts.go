package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/controller/api"
)

// PutArtifact stores the bytes of r as an untrusted artifact owned by the workspace.
func (c *Client) PutArtifact(ctx context.Context, workspace, name string, r io.Reader) (api.Artifact, error) {
	var a api.Artifact
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	return a, c.do(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(workspace) + "/artifacts",
		query: q, body: r, contentType: "application/octet-stream"}, &a)
}

func (c *Client) ListArtifacts(ctx context.Context, workspace string) ([]api.Artifact, error) {
	var out []api.Artifact
	return out, c.get(ctx, "/v1/workspaces/"+url.PathEscape(workspace)+"/artifacts", nil, &out)
}

func (c *Client) GetArtifact(ctx context.Context, id string) (api.Artifact, error) {
	var a api.Artifact
	return a, c.get(ctx, "/v1/artifacts/"+url.PathEscape(id), nil, &a)
}

// RevokeArtifact revokes an artifact at once and returns its record.
func (c *Client) RevokeArtifact(ctx context.Context, id string) (api.Artifact, error) {
	var a api.Artifact
	// A revoked artifact stays revoked as of the first revocation: a repeat changes nothing.
	return a, c.do(ctx, request{method: http.MethodPost, path: "/v1/artifacts/" + url.PathEscape(id) + "/revoke", idempotent: true}, &a)
}
