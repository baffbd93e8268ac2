package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/controller/api"
)

// CreateProject records a project once the controller cloned its source.
func (c *Client) CreateProject(ctx context.Context, req api.CreateProjectRequest) (api.Project, error) {
	var p api.Project
	return p, c.sendJSON(ctx, http.MethodPost, "/v1/projects", req, &p)
}

// ListProjects lists projects, oldest first.
func (c *Client) ListProjects(ctx context.Context) ([]api.Project, error) {
	var list []api.Project
	return list, c.get(ctx, "/v1/projects", nil, &list)
}

// GetProject finds a project by id or name.
func (c *Client) GetProject(ctx context.Context, id string) (api.Project, error) {
	var p api.Project
	return p, c.get(ctx, "/v1/projects/"+url.PathEscape(id), nil, &p)
}

// InspectWorkspace computes a project workspace's Git state and delivery.
func (c *Client) InspectWorkspace(ctx context.Context, id string) (api.Inspection, error) {
	var in api.Inspection
	return in, c.get(ctx, "/v1/workspaces/"+url.PathEscape(id)+"/inspect", nil, &in)
}

// ReconcileWorkspace takes the source's base ref into a project workspace.
func (c *Client) ReconcileWorkspace(ctx context.Context, id string) (api.ReconcileResult, error) {
	var res api.ReconcileResult
	return res, c.do(ctx, request{method: http.MethodPost, path: "/v1/workspaces/" + url.PathEscape(id) + "/reconcile"}, &res)
}

// GC sweeps closed workspaces (see api.GCRequest).
func (c *Client) GC(ctx context.Context, req api.GCRequest) (api.GCResult, error) {
	var res api.GCResult
	// A sweep reclaims only what may be reclaimed and finishes what an interrupted one left: a
	// second sweep after the first does nothing the first would not have.
	return res, c.doJSON(ctx, request{method: http.MethodPost, path: "/v1/gc", idempotent: true}, req, &res)
}
