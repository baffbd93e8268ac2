package project

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/gitsource"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// Plan is a settled project workspace request: the branch's open workspace to hand out again
// (Reuse), or the checkout of a new one (Git), planned under the branch's lock, which Release
// lets go once the new workspace is recorded.
type Plan struct {
	Project api.Project
	Git     *api.WorkspaceGit
	// Reuse is the branch's open workspace (shared and operator-branch modes), as it was found:
	// the caller reopens it if it is closed.
	Reuse  *api.Workspace
	unlock func()
}

// Release lets go of the branch's lock a plan for a new workspace holds; it may be called on
// any plan, more than once.
func (p *Plan) Release() {
	if p.unlock != nil {
		p.unlock()
		p.unlock = nil
	}
}

// Plan settles a project workspace request: its project, mode, branch and strategy. For
// shared and operator-branch modes it finds the branch's open workspace (Reuse), and otherwise
// returns with the branch's lock held (Release lets it go) so the new record is the only one
// this controller makes. Everything is checked before any sandbox starts.
func (s *Projects) Plan(ctx context.Context, req api.CreateWorkspaceRequest) (Plan, error) {
	fail := func(err error) (Plan, error) {
		return Plan{}, err
	}
	proj, err := s.Get(ctx, req.Project)
	if err != nil {
		return fail(err)
	}
	mode := cmp.Or(req.Mode, proj.Mode)
	if !validMode(mode) {
		return fail(protocol.Errorf(protocol.CodeInvalidArgument, "mode %q: want isolated, shared or operator-branch", mode))
	}
	branch := req.Branch
	switch {
	case branch != "":
	case mode == api.ModeIsolated:
		branch = "tether/" + req.Name
	case mode == api.ModeShared:
		branch = "tether/shared"
	default:
		return fail(protocol.Errorf(protocol.CodeInvalidArgument, "mode operator-branch needs --branch"))
	}
	if err := checkBranch(&branch); err != nil {
		return fail(err)
	}
	if branch == proj.BaseRef {
		// The base clone's copy of the base ref follows the source; a workspace writing to it
		// would have its commits overwritten by the next fetch.
		return fail(protocol.Errorf(protocol.CodeInvalidArgument,
			"branch %q is the project's base ref; a workspace works on a branch of its own", branch))
	}
	unlock := s.locks.lock(proj.ID + "\x00branch\x00" + branch)
	ws, found, err := s.store.OpenWorkspaceFor(ctx, proj.ID, branch)
	if err != nil {
		unlock()
		return fail(err)
	}
	if found {
		unlock()
		switch {
		case mode == api.ModeIsolated || ws.Git.Mode == api.ModeIsolated:
			return fail(protocol.Errorf(protocol.CodeConflict, "branch %q belongs to workspace %s (%s, %s)", branch, ws.Name, ws.Git.Mode, ws.State))
		case req.Provider != "" && req.Provider != ws.Provider:
			return fail(protocol.Errorf(protocol.CodeConflict, "branch %q's shared workspace %s runs on provider %s, not %s", branch, ws.Name, ws.Provider, req.Provider))
		case len(req.Provision) > 0 || len(req.Teardown) > 0:
			return fail(protocol.Errorf(protocol.CodeInvalidArgument, "branch %q's shared workspace %s exists: --provision and --teardown apply to a new one only", branch, ws.Name))
		}
		return Plan{Project: proj, Reuse: &ws}, nil
	}
	repo, commit, err := s.FetchBase(ctx, proj)
	if err != nil {
		unlock()
		return fail(fmt.Errorf("project %s: %w", proj.Name, err))
	}
	start, err := s.startPoint(ctx, proj, repo, branch)
	if err != nil {
		unlock()
		return fail(err)
	}
	git := &api.WorkspaceGit{ProjectID: proj.ID, Mode: mode, Strategy: api.StrategyClone, Branch: branch,
		BaseRef: proj.BaseRef, BaseCommit: commit, Provision: req.Provision, Teardown: req.Teardown}
	if start != commit {
		git.StartCommit = start
	}
	return Plan{Project: proj, Git: git, unlock: unlock}, nil
}

// startPoint settles the commit a new workspace's branch starts at (the caller holds the
// branch's lock, and no open workspace has the branch). A branch the source has starts at its
// tip there: an operator who names an existing branch means to work on it. Any other branch
// starts at the base ref's commit (returned as ""). The source's branch is fetched apart from
// the base clone's branches; one of those with the name (the clone's copy of the source's, or
// one an earlier Tether's worktree left) is only ever replaced when the tip contains all of it, and a
// branch only the base clone still has is refused: neither is overwritten.
func (s *Projects) startPoint(ctx context.Context, proj api.Project, repo *gitsource.Repo, branch string) (string, error) {
	unlock := s.locks.lock(proj.ID)
	defer unlock()
	tip, err := repo.FetchIncoming(ctx, branch)
	if err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
		return "", fmt.Errorf("branch %q at the source of project %s: %w", branch, proj.Name, err)
	}
	held, herr := repo.Resolve(ctx, "refs/heads/"+branch)
	switch {
	case herr != nil && protocol.CodeOf(herr) != protocol.CodeNotFound:
		return "", herr
	case err != nil && herr != nil:
		return "", nil // a new branch
	case err != nil:
		return "", protocol.Errorf(protocol.CodeConflict,
			"branch %q is in project %s's base clone but no longer at its source (deleted there since it was cloned, or left by an earlier version's workspace); name another with --branch or --name", branch, proj.Name)
	case herr == nil:
		contained, aerr := repo.IsAncestor(ctx, held, gitsource.IncomingPrefix+branch)
		if aerr != nil {
			return "", aerr
		}
		if !contained {
			return "", protocol.Errorf(protocol.CodeConflict,
				"branch %q in project %s's base clone has commits its source's branch does not (the source's was rewound since it was cloned, or an earlier version's workspace left it); name another with --branch or --name", branch, proj.Name)
		}
		// Everything it holds is in the tip, which the incoming ref keeps: the workspace's
		// checkout creates the branch afresh inside its own repository.
		if err := repo.DeleteBranch(ctx, branch); err != nil {
			return "", err
		}
	}
	return tip, nil
}

// Checkout fills a new allocation, whose runner is c, with ws's checkout. Whatever the
// provider, the checkout is a repository of the workspace's own that the runner builds from a
// pack of every object reachable from the commit (and the base commit): nothing of the base
// clone (config, hooks, refs, objects) is shared with the workspace, so nothing the workspace
// writes reaches the controller's git.
func (s *Projects) Checkout(ctx context.Context, c *hub.Conn, ws api.Workspace, proj api.Project) error {
	g := ws.Git
	args := protocol.GitCheckoutArgs{Strategy: protocol.GitStrategyClone, Branch: g.Branch, Commit: cmp.Or(g.StartCommit, g.BaseCommit),
		BaseRef: g.BaseRef, BaseCommit: g.BaseCommit}
	pack, err := s.packReader(ctx, proj, []string{args.Commit, args.BaseCommit}, nil)
	if err == nil {
		var st protocol.GitStatus
		err = c.CallWithBody(ctx, protocol.OpGitCheckout, ws.Epoch, args, pack, &st)
		pack.Close()
	}
	if err != nil {
		return fmt.Errorf("checkout of %s at %s: %w", g.Branch, short(args.Commit), err)
	}
	return nil
}

// packReader streams a pack of the base clone's objects reachable from want and not from have.
// The project's lock covers only opening the base clone: git reads objects safely beside a fetch,
// and a sweep never removes a base clone an open workspace (this one) uses, so a slow runner
// reading its pack holds up no other request.
func (s *Projects) packReader(ctx context.Context, proj api.Project, want, have []string) (io.ReadCloser, error) {
	unlock := s.locks.lock(proj.ID)
	repo, err := s.baseRepo(ctx, proj)
	unlock()
	if err != nil {
		return nil, err
	}
	var wants []string
	for _, w := range want {
		if w != "" && !slices.Contains(wants, w) {
			wants = append(wants, w)
		}
	}
	pr, pw := io.Pipe()
	// The writer ends with the pack, or when ctx ends or the reader is closed.
	if !s.goRoutine("checkout pack "+proj.ID, func(context.Context) { pw.CloseWithError(repo.Pack(ctx, pw, wants, have)) }) {
		pw.Close()
		return nil, protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")
	}
	return pr, nil
}

// goRoutine starts fn as the routine name of the owner (Config.Go), or as a goroutine without one.
func (s *Projects) goRoutine(name string, fn func(ctx context.Context)) bool {
	if s.cfg.Go != nil {
		return s.cfg.Go(name, fn)
	}
	go fn(context.Background())
	return true
}

func short(commit string) string { return commit[:min(len(commit), 12)] }
