package controller

import (
	"context"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// principal is who made an API call: the operator (the operator token, or an API token not
// limited to workspaces) or an API token limited to some workspaces.
//
// A limited token acts as the operator of its workspaces and of nothing else: every other
// workspace, and every snapshot, artifact, run and project that is not one of its workspaces',
// is not_found to it, in the same words as a record that does not exist; lists show it only its
// own. What is not about one of its workspaces is refused (unauthorized): creating workspaces
// (a snapshot restore creates one) and projects, gc (a sweep across every workspace), the
// provider plugins (the controller's setup), export (it writes to a directory of the
// controller's host) and API tokens (a limited token could otherwise mint an unlimited one).
type principal struct {
	token string // the API token's name; "" for the operator token
	// workspaces are the ids a limited token may see; nil: every workspace.
	workspaces map[string]bool
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf is who made the call ctx belongs to. Work the controller does on its own
// (provisioning, runner operations, the gc loop) carries none: it is the operator's. Every API
// call carries one (requireOperator puts it there).
func principalOf(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

// String names the principal in the controller's log.
func (p principal) String() string {
	if p.token == "" {
		return "operator"
	}
	return "API token " + p.token
}

func (p principal) limited() bool { return p.workspaces != nil }

// sees says whether the workspace of that id is the principal's.
func (p principal) sees(workspaceID string) bool {
	return p.workspaces == nil || p.workspaces[workspaceID]
}

// refuse is the answer to a limited token that asks for what only the operator may do.
func (p principal) refuse(what string) error {
	return protocol.Errorf(protocol.CodeUnauthorized,
		"API token %q is limited to its workspaces; %s needs the operator token or an API token not limited to workspaces", p.token, what)
}

// notFound is the store's answer for a record that does not exist: what a limited token gets
// for another workspace's, word for word, so it learns nothing of it.
func notFound(kind, idOrName string) error {
	return protocol.Errorf(protocol.CodeNotFound, "%s %q not found", kind, idOrName)
}

// routeScope says who may call a route of the operator API and what its {id} names: a limited
// token is held to its workspaces before the handler runs. The central lookups (workspace,
// snapshot, artifact, run, project) apply the same limit, so a handler that reaches a record
// any other way than its route's {id} is held to it too.
type routeScope int

const (
	// scopeOperator: the operator's alone; refused to a limited token.
	scopeOperator routeScope = iota + 1
	// scopeList: a list; its handler shows a limited token only what it may see.
	scopeList
	// scopeWorkspace, scopeSnapshot, scopeArtifact, scopeRun, scopeProject: {id} names a record
	// of that kind, not_found to a limited token unless it belongs to one of its workspaces (a
	// project: unless one of its workspaces is a checkout of it).
	scopeWorkspace
	scopeSnapshot
	scopeArtifact
	scopeRun
	scopeProject
)

// route is one route of the operator API.
type route struct {
	pattern string
	scope   routeScope
	handle  http.HandlerFunc
}

// guard admits a call of rt: a limited token only to what rt's scope allows it.
func (s *Server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r.Context()); p.limited() {
			if err := s.admit(r, p, rt.scope); err != nil {
				writeError(w, err)
				return
			}
		}
		rt.handle(w, r)
	})
}

// admit checks a limited token's call against its route's scope; the lookups below refuse a
// record outside its workspaces exactly as a missing one.
func (s *Server) admit(r *http.Request, p principal, scope routeScope) error {
	ctx, id := r.Context(), r.PathValue("id")
	var err error
	switch scope {
	case scopeOperator:
		err = p.refuse(r.Pattern)
	case scopeList:
	case scopeWorkspace:
		_, err = s.workspace(ctx, id)
	case scopeSnapshot:
		_, err = s.snapshot(ctx, id)
	case scopeArtifact:
		_, err = s.artifact(ctx, id)
	case scopeRun:
		_, err = s.run(ctx, id)
	case scopeProject:
		_, err = s.project(ctx, id)
	default:
		// A route without a scope is a mistake: refused rather than open.
		err = protocol.Errorf(protocol.CodeInternal, "route %s has no scope", r.Pattern)
	}
	return err
}

// artifact loads an artifact record, held to the caller's workspaces.
func (s *Server) artifact(ctx context.Context, id string) (api.Artifact, error) {
	a, err := s.store.GetArtifact(ctx, id)
	if err == nil && !principalOf(ctx).sees(a.WorkspaceID) {
		return api.Artifact{}, notFound("artifact", id)
	}
	return a, err
}

// run loads a run record, held to the caller's workspaces.
func (s *Server) run(ctx context.Context, id string) (api.Run, error) {
	if err := expectKind(id, "run_"); err != nil {
		return api.Run{}, err
	}
	run, err := s.store.GetRun(ctx, id)
	if err == nil && !principalOf(ctx).sees(run.WorkspaceID) {
		return api.Run{}, notFound("run", id)
	}
	return run, err
}

// project loads a project (by id or name); a limited token sees only the projects its
// workspaces are checkouts of.
func (s *Server) project(ctx context.Context, idOrName string) (api.Project, error) {
	proj, err := s.projects.Get(ctx, idOrName)
	if err != nil {
		return proj, err
	}
	if p := principalOf(ctx); p.limited() {
		mine, err := s.visibleProjects(ctx, p)
		if err != nil {
			return api.Project{}, err
		}
		if !mine[proj.ID] {
			return api.Project{}, notFound("project", idOrName)
		}
	}
	return proj, nil
}

// visibleProjects are the ids of the projects a limited token's workspaces are checkouts of.
func (s *Server) visibleProjects(ctx context.Context, p principal) (map[string]bool, error) {
	out := map[string]bool{}
	for id := range p.workspaces {
		ws, err := s.store.GetWorkspace(ctx, id)
		if protocol.CodeOf(err) == protocol.CodeNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ws.Git != nil {
			out[ws.Git.ProjectID] = true
		}
	}
	return out, nil
}
