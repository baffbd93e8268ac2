package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/gitsource"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// outputTail bounds the output kept of a provision or teardown command.
const outputTail = 64 << 10

// planCheckout settles a project workspace request: its project, mode, branch and strategy. For
// shared and operator-branch modes it finds the branch's open workspace (reused) — reopening it
// if closed — and otherwise returns with the branch's lock held (unlock releases it) so the new
// record is the only one this controller makes. Everything is checked before any sandbox starts.
func (s *Server) planCheckout(ctx context.Context, req api.CreateWorkspaceRequest) (api.Project, *api.WorkspaceGit, *api.Workspace, func(), error) {
	noop := func() {}
	fail := func(err error) (api.Project, *api.WorkspaceGit, *api.Workspace, func(), error) {
		return api.Project{}, nil, nil, noop, err
	}
	proj, err := s.project(ctx, req.Project)
	if err != nil {
		return fail(err)
	}
	mode := firstNonEmpty(req.Mode, proj.Mode)
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
	unlock := s.projectLocks.lock(proj.ID + "\x00branch\x00" + branch)
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
		reused, err := s.reuseWorkspace(ctx, ws)
		return proj, nil, &reused, noop, err
	}
	repo, commit, err := s.fetchBase(ctx, proj)
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
	return proj, git, nil, unlock, nil
}

// startPoint settles the commit a new workspace's branch starts at (the caller holds the
// branch's lock, and no open workspace has the branch). A branch the source has starts at its
// tip there: an operator who names an existing branch means to work on it. Any other branch
// starts at the base ref's commit (returned as ""). The source's branch is fetched apart from
// the base clone's branches; one of those with the name (the clone's copy of the source's, or
// one an earlier Tether's worktree left) is only ever replaced when the tip contains all of it, and a
// branch only the base clone still has is refused: neither is overwritten.
func (s *Server) startPoint(ctx context.Context, proj api.Project, repo *gitsource.Repo, branch string) (string, error) {
	unlock := s.projectLocks.lock(proj.ID)
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

// reuseWorkspace hands out a shared branch's existing workspace, reopening it when closed; when
// another request is reopening it at the same time, both get the workspace it reopened.
func (s *Server) reuseWorkspace(ctx context.Context, ws api.Workspace) (api.Workspace, error) {
	if ws.State == api.StateClosed || ws.State == api.StateReclaiming {
		if _, err := s.ReopenWorkspace(ctx, ws.ID, api.ReopenRequest{}); err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
			return ws, err
		}
	}
	return s.workspace(ctx, ws.ID)
}

// prepareCheckout fills a new allocation with its checkout and runs the provision commands, all
// through the runner inside the allocation. Whatever the provider, the checkout is a repository
// of the workspace's own that the runner builds from a pack of every object reachable from the
// commit (and the base commit): nothing of the base clone (config, hooks, refs, objects) is
// shared with the workspace, so nothing the workspace writes reaches the controller's git.
func (s *Server) prepareCheckout(ctx context.Context, ws api.Workspace, proj api.Project) error {
	c, ok := s.hub.Get(ws.AllocationID)
	if !ok {
		return protocol.Errorf(protocol.CodeUnavailable, "the runner of workspace %s disconnected", ws.ID)
	}
	g := ws.Git
	args := protocol.GitCheckoutArgs{Strategy: protocol.GitStrategyClone, Branch: g.Branch, Commit: firstNonEmpty(g.StartCommit, g.BaseCommit),
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
	return s.runCommands(ctx, c, ws, "provision", append(append([]string{}, proj.Provision...), g.Provision...))
}

// packReader streams a pack of the base clone's objects reachable from want and not from have.
// The project's lock covers only opening the base clone: git reads objects safely beside a fetch,
// and a sweep never removes a base clone an open workspace (this one) uses, so a slow runner
// reading its pack holds up no other request.
func (s *Server) packReader(ctx context.Context, proj api.Project, want, have []string) (io.ReadCloser, error) {
	unlock := s.projectLocks.lock(proj.ID)
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
	go func() { pw.CloseWithError(repo.Pack(ctx, pw, wants, have)) }()
	return pr, nil
}

func short(commit string) string { return commit[:min(len(commit), 12)] }

// runCommands runs each command with `sh -c` in the workspace root through the runner, in order,
// each recorded as a run of kind with its output tail. The first failure stops the rest and is
// returned with the tail.
func (s *Server) runCommands(ctx context.Context, c *hub.Conn, ws api.Workspace, kind string, cmds []string) error {
	for _, cmd := range cmds {
		run, err := s.runScript(ctx, c, ws, kind, cmd)
		if err != nil {
			return fmt.Errorf("%s command %q: %w", kind, cmd, err)
		}
		if run.State != api.RunExited || run.ExitCode == nil || *run.ExitCode != 0 {
			how := run.State
			if run.ExitCode != nil {
				how = fmt.Sprintf("exited with %d", *run.ExitCode)
			}
			return protocol.Errorf(protocol.CodeFailed, "%s command %q %s (run %s); its output ends:\n%s", kind, cmd, how, run.ID, lastLines(run.Output, 4<<10))
		}
	}
	return nil
}

// runScript runs one shell command through the runner and records it.
func (s *Server) runScript(ctx context.Context, c *hub.Conn, ws api.Workspace, kind, script string) (api.Run, error) {
	args := protocol.ExecArgs{RunID: newID("run_"), Argv: []string{"sh", "-c", script}}
	run := api.Run{ID: args.RunID, WorkspaceID: ws.ID, AllocationID: ws.AllocationID, Argv: args.Argv,
		State: api.RunRunning, Epoch: ws.Epoch, StartedAt: time.Now().UTC(), Kind: kind}
	if err := s.store.CreateRun(ctx, run); err != nil {
		return run, err
	}
	out := &tailBuffer{max: outputTail}
	exit, err := s.execCollect(ctx, c, ws.Epoch, args, out)
	if err != nil {
		exit = protocol.ExecExit{ExitCode: -1, Error: protocol.AsError(err)}
	}
	bg := context.WithoutCancel(ctx)
	if ferr := s.finishRun(bg, run.ID, exit); ferr != nil {
		return run, ferr
	}
	run.Output = out.String()
	if oerr := s.store.SetRunOutput(bg, run.ID, kind, run.Output); oerr != nil {
		return run, oerr
	}
	return s.store.GetRun(bg, run.ID)
}

// execCollect runs args on the runner and copies stdout and stderr, interleaved, into out.
func (s *Server) execCollect(ctx context.Context, c *hub.Conn, epoch uint64, args protocol.ExecArgs, out io.Writer) (protocol.ExecExit, error) {
	st, err := c.Open(protocol.OpExec, args.RunID, epoch, args)
	if err != nil {
		return protocol.ExecExit{}, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	buf := make([]byte, 256<<10)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			return protocol.ExecExit{}, protocol.Errorf(protocol.CodeUnavailable, "lost the runner while running %q: %v", args.Argv, err)
		}
		switch ch {
		case protocol.ChanStdout, protocol.ChanStderr:
			_, _ = out.Write(p)
		case protocol.ChanExit:
			var exit protocol.ExecExit
			if err := json.Unmarshal(p, &exit); err != nil {
				return exit, protocol.Errorf(protocol.CodeInternal, "bad exit frame: %v", err)
			}
			return exit, nil
		}
	}
}

// lastLines is the end of s, at most n bytes, cut at a line start.
func lastLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return s
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// teardown runs the workspace's teardown commands before its allocation is released. A failing
// teardown is recorded (its run and an event) but does not hold the release: the work is saved
// by then, and a sandbox kept for a broken cleanup script would leak.
func (s *Server) teardown(ctx context.Context, ws api.Workspace) {
	if ws.Git == nil {
		return
	}
	proj, err := s.store.GetProject(ctx, ws.Git.ProjectID)
	if err != nil {
		return
	}
	cmds := append(append([]string{}, proj.Teardown...), ws.Git.Teardown...)
	if len(cmds) == 0 {
		return
	}
	c, ok := s.hub.Get(ws.AllocationID)
	if !ok {
		return
	}
	if err := s.runCommands(ctx, c, ws, "teardown", cmds); err != nil {
		s.log.Warn("teardown failed", "workspace", ws.ID, "err", err)
		if cur, gerr := s.store.GetWorkspace(ctx, ws.ID); gerr == nil {
			_ = s.store.UpdateWorkspace(ctx, ws.ID, cur.State, cur.Reason, "teardown failed: "+firstLine(protocol.AsError(err).Message))
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
