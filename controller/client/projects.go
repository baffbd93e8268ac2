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
	body, err := jsonBody(req)
	if err != nil {
		return p, err
	}
	return p, c.do(ctx, http.MethodPost, "/v1/projects", nil, body, "application/json", &p)
}

// ListProjects lists projects, oldest first.
func (c *Client) ListProjects(ctx context.Context) ([]api.Project, error) {
	var list []api.Project
	return list, c.do(ctx, http.MethodGet, "/v1/projects", nil, nil, "", &list)
}

// GetProject finds a project by id or name.
func (c *Client) GetProject(ctx context.Context, id string) (api.Project, error) {
	var p api.Project
	return p, c.do(ctx, http.MethodGet, "/v1/projects/"+url.PathEscape(id), nil, nil, "", &p)
}

// InspectWorkspace computes a project workspace's Git state and delivery.
func (c *Client) InspectWorkspace(ctx context.Context, id string) (api.Inspection, error) {
	var in api.Inspection
	return in, c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(id)+"/inspect", nil, nil, "", &in)
}

// ReconcileWorkspace takes the source's base ref into a project workspace.
func (c *Client) ReconcileWorkspace(ctx context.Context, id string) (api.ReconcileResult, error) {
	var res api.ReconcileResult
	return res, c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(id)+"/reconcile", nil, nil, "", &res)
}

// GC sweeps closed workspaces (see api.GCRequest).
func (c *Client) GC(ctx context.Context, req api.GCRequest) (api.GCResult, error) {
	var res api.GCResult
	body, err := jsonBody(req)
	if err != nil {
		return res, err
	}
	return res, c.do(ctx, http.MethodPost, "/v1/gc", nil, body, "application/json", &res)
}
