package controller

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// gitWorkspace loads a workspace that must be a project workspace, and its project.
func (s *Server) gitWorkspace(ctx context.Context, idOrName string) (api.Workspace, api.Project, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return ws, api.Project{}, err
	}
	if ws.Git == nil {
		return ws, api.Project{}, protocol.Errorf(protocol.CodeInvalidArgument, "workspace %s is not a project workspace (create it with --project)", ws.Name)
	}
	p, err := s.store.GetProject(ctx, ws.Git.ProjectID)
	return ws, p, err
}

func (s *Server) handleInspect(w http.ResponseWriter, r *http.Request) {
	ws, p, err := s.gitWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	in, err := s.projects.Inspect(r.Context(), ws, p, s.headState)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// headState reads the workspace's repository state: live from its runner, or from the Git
// state its last receipt recorded (ahead/behind then as of that capture).
func (s *Server) headState(ctx context.Context, ws api.Workspace, baseCommit string) (protocol.GitStatus, string, error) {
	if ws.State == api.StateReady {
		if c, ok := s.runnerOf(ctx, ws.AllocationID); ok {
			var st protocol.GitStatus
			err := c.Call(ctx, protocol.OpGitInspect, 0, protocol.GitInspectArgs{BaseCommit: baseCommit}, &st)
			return st, "live", err
		}
	}
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		return protocol.GitStatus{}, "", err
	}
	if last == nil || len(last.Git) == 0 {
		return protocol.GitStatus{}, "", protocol.Errorf(protocol.CodeUnavailable, "workspace %s has no runner and no saved Git state to inspect", ws.Name)
	}
	var saved struct {
		Head, Branch                               string
		Ahead, Behind, Staged, Unstaged, Untracked int
	}
	if err := json.Unmarshal(last.Git, &saved); err != nil {
		return protocol.GitStatus{}, "", protocol.Errorf(protocol.CodeCorrupt, "receipt %s: git state: %v", last.ID, err)
	}
	return protocol.GitStatus{Head: saved.Head, Branch: saved.Branch, Ahead: saved.Ahead, Behind: saved.Behind,
		Staged: saved.Staged, Unstaged: saved.Unstaged, Untracked: saved.Untracked}, "saved", nil
}

func (s *Server) handleReconcile(w http.ResponseWriter, r *http.Request) {
	ws, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ws, p, err := s.gitWorkspace(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.projects.Reconcile(r.Context(), c, epoch, ws, p)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
