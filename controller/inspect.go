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
	in, err := s.inspect(r.Context(), ws, p)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// inspect computes a workspace's Git state and delivery, on demand: the base ref is fetched from
// the source into the base clone, HEAD is read live from the runner (or, for a workspace without
// one, from its last receipt), and the work is delivered when the source's base ref contains
// HEAD. The workspace's repository is only ever read by its runner: the controller's git runs
// on the base clone alone, with a commit id from the runner as an argument. A source that
// cannot be reached makes delivery unknown, not an error.
func (s *Server) inspect(ctx context.Context, ws api.Workspace, p api.Project) (api.Inspection, error) {
	in := api.Inspection{WorkspaceID: ws.ID, BaseRef: ws.Git.BaseRef, Delivery: api.DeliveryUnknown}
	repo, baseCommit, fetchErr := s.fetchBase(ctx, p)
	if fetchErr == nil {
		in.BaseCommit = baseCommit
	}
	st, source, err := s.headState(ctx, ws, firstNonEmpty(baseCommit, ws.Git.BaseCommit))
	if err != nil {
		return in, err
	}
	in.Source, in.Head, in.Branch = source, st.Head, st.Branch
	in.Ahead, in.Behind, in.Staged, in.Unstaged, in.Untracked = st.Ahead, st.Behind, st.Staged, st.Unstaged, st.Untracked
	switch {
	case fetchErr != nil:
		in.Reason = "source unreachable: " + protocol.AsError(fetchErr).Message
	case in.Head == "":
		in.Reason = "the workspace has no commit"
	default:
		unlock := s.projectLocks.lock(p.ID)
		merged, err := repo.IsAncestor(ctx, in.Head, "refs/heads/"+p.BaseRef)
		unlock()
		switch {
		case err != nil:
			in.Reason = protocol.AsError(err).Message
		case merged:
			in.Delivery = api.DeliveredByAncestry
		default:
			in.Delivery = api.Unmerged
		}
	}
	return in, nil
}

// headState reads the workspace's repository state: live from its runner, or from the Git
// state its last receipt recorded (ahead/behind then as of that capture).
func (s *Server) headState(ctx context.Context, ws api.Workspace, baseCommit string) (protocol.GitStatus, string, error) {
	if ws.State == api.StateReady {
		if c, ok := s.hub.Get(ws.AllocationID); ok {
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
	_, baseCommit, err := s.fetchBase(r.Context(), p)
	if err != nil {
		writeError(w, err)
		return
	}
	var st protocol.GitStatus
	if err := c.Call(r.Context(), protocol.OpGitInspect, 0, protocol.GitInspectArgs{BaseCommit: baseCommit}, &st); err != nil {
		writeError(w, err)
		return
	}
	// The workspace's repository is its own: the base's objects travel as a pack, less what the
	// workspace surely has, and the runner takes them in.
	args := protocol.GitReconcileArgs{BaseRef: ws.Git.BaseRef, Commit: baseCommit, HasPack: true}
	var reply protocol.GitReconcileReply
	var have []string
	for _, h := range []string{ws.Git.BaseCommit, st.Head} {
		if s.hasCommit(r.Context(), p, h) {
			have = append(have, h)
		}
	}
	pack, err := s.packReader(r.Context(), p, []string{baseCommit}, have)
	if err == nil {
		err = c.CallWithBody(r.Context(), protocol.OpGitReconcile, epoch, args, pack, &reply)
		pack.Close()
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ReconcileResult{WorkspaceID: ws.ID, BaseRef: ws.Git.BaseRef, BaseCommit: baseCommit,
		Before: reply.Before, After: reply.After, Ahead: reply.Ahead, Behind: reply.Behind, Action: reply.Action})
}

// hasCommit says whether the project's base clone holds commit.
func (s *Server) hasCommit(ctx context.Context, p api.Project, commit string) bool {
	if commit == "" {
		return false
	}
	unlock := s.projectLocks.lock(p.ID)
	defer unlock()
	repo, err := s.baseRepo(ctx, p)
	return err == nil && repo.HasCommit(ctx, commit)
}
