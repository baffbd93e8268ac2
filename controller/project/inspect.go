package project

import (
	"cmp"
	"context"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// Inspect computes a workspace's Git state and delivery, on demand: the base ref is fetched from
// the source into the base clone, HEAD is read live from the runner (or, for a workspace without
// one, from its last receipt), and the work is delivered when the source's base ref contains
// HEAD. The workspace's repository is only ever read by its runner: the controller's git runs
// on the base clone alone, with a commit id from the runner as an argument. A source that
// cannot be reached makes delivery unknown, not an error.
//
// head reads the workspace's repository state for a base commit, and says where from ("live" or
// "saved").
func (s *Projects) Inspect(ctx context.Context, ws api.Workspace, p api.Project,
	head func(ctx context.Context, ws api.Workspace, baseCommit string) (protocol.GitStatus, string, error)) (api.Inspection, error) {
	in := api.Inspection{WorkspaceID: ws.ID, BaseRef: ws.Git.BaseRef, Delivery: api.DeliveryUnknown}
	repo, baseCommit, fetchErr := s.FetchBase(ctx, p)
	if fetchErr == nil {
		in.BaseCommit = baseCommit
	}
	st, source, err := head(ctx, ws, cmp.Or(baseCommit, ws.Git.BaseCommit))
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
		unlock := s.locks.lock(p.ID)
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

// Reconcile brings the base ref's newest commit from the source into ws's repository through
// its runner c, writing under epoch: the base's objects travel as a pack, less what the
// workspace surely has, and the runner takes them in and reconciles its branch.
func (s *Projects) Reconcile(ctx context.Context, c *hub.Conn, epoch uint64, ws api.Workspace, p api.Project) (api.ReconcileResult, error) {
	_, baseCommit, err := s.FetchBase(ctx, p)
	if err != nil {
		return api.ReconcileResult{}, err
	}
	var st protocol.GitStatus
	if err := c.Call(ctx, protocol.OpGitInspect, 0, protocol.GitInspectArgs{BaseCommit: baseCommit}, &st); err != nil {
		return api.ReconcileResult{}, err
	}
	// The workspace's repository is its own: the base's objects travel as a pack, less what the
	// workspace surely has, and the runner takes them in.
	args := protocol.GitReconcileArgs{BaseRef: ws.Git.BaseRef, Commit: baseCommit, HasPack: true}
	var reply protocol.GitReconcileReply
	var have []string
	for _, h := range []string{ws.Git.BaseCommit, st.Head} {
		if s.hasCommit(ctx, p, h) {
			have = append(have, h)
		}
	}
	pack, err := s.packReader(ctx, p, []string{baseCommit}, have)
	if err == nil {
		err = c.CallWithBody(ctx, protocol.OpGitReconcile, epoch, args, pack, &reply)
		pack.Close()
	}
	if err != nil {
		return api.ReconcileResult{}, err
	}
	return api.ReconcileResult{WorkspaceID: ws.ID, BaseRef: ws.Git.BaseRef, BaseCommit: baseCommit,
		Before: reply.Before, After: reply.After, Ahead: reply.Ahead, Behind: reply.Behind, Action: reply.Action}, nil
}

// hasCommit says whether the project's base clone holds commit.
func (s *Projects) hasCommit(ctx context.Context, p api.Project, commit string) bool {
	if commit == "" {
		return false
	}
	unlock := s.locks.lock(p.ID)
	defer unlock()
	repo, err := s.baseRepo(ctx, p)
	return err == nil && repo.HasCommit(ctx, commit)
}
