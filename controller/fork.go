package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// MaxForks bounds one fork request; forkConcurrency is how many of its restores run at once (each
// is a sandbox starting and a receipt streaming into it).
const (
	MaxForks        = 32
	forkConcurrency = 4
)

// ForkBranchPrefix starts the Git branch of each fork of a project workspace.
const ForkBranchPrefix = "tether/"

func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	res, err := s.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

// forkPlan is what a fork makes, decided before anything is made.
type forkPlan struct {
	src      api.Workspace
	names    []string
	provider string
}

func (s *Server) planFork(ctx context.Context, idOrName string, req api.ForkRequest) (forkPlan, error) {
	src, err := s.workspace(ctx, idOrName)
	if err != nil {
		return forkPlan{}, err
	}
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxForks {
		return forkPlan{}, protocol.Errorf(protocol.CodeInvalidArgument, "fork count %d: must be 1 to %d", req.Count, MaxForks)
	}
	prefix := req.NamePrefix
	if prefix == "" {
		prefix = src.Name + "-fork"
	}
	p := forkPlan{src: src, provider: req.Provider}
	if p.provider == "" {
		p.provider = src.Provider
	}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if err := checkName("workspace", name, ""); err != nil {
			return forkPlan{}, err
		}
		// Refused before anything is made; a name taken meanwhile fails that fork's restore.
		if _, err := s.store.GetWorkspace(ctx, name); err == nil {
			return forkPlan{}, protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", name)
		} else if protocol.CodeOf(err) != protocol.CodeNotFound {
			return forkPlan{}, err
		}
		p.names = append(p.names, name)
	}
	return p, nil
}

// forkSource is the receipt the forks start from: req.From (a receipt of the workspace), else a
// fresh checkpoint, which is the newest receipt when the tree did not change since it.
func (s *Server) forkSource(ctx context.Context, src api.Workspace, from string) (api.Snapshot, error) {
	if from != "" {
		snap, err := s.snapshot(ctx, from)
		if err != nil {
			return snap, err
		}
		if snap.WorkspaceID != src.ID {
			return api.Snapshot{}, protocol.Errorf(protocol.CodeInvalidArgument, "snapshot %s is not a receipt of workspace %s", snap.ID, src.ID)
		}
		if snap.ReclaimedAt != nil {
			return api.Snapshot{}, protocol.Errorf(protocol.CodeConflict, "snapshot %s was reclaimed by gc; its object is gone", snap.ID)
		}
		return snap, nil
	}
	if _, err := s.liveConn(ctx, src.ID); err != nil {
		return api.Snapshot{}, fmt.Errorf("fork needs a fresh checkpoint of %s (or --from a receipt): %w", src.Name, err)
	}
	snap, err := s.captureWorkspaceAs(ctx, src, captureOpts{checkpoint: true})
	if err != nil && !errors.Is(err, errTreeUnchanged) {
		return api.Snapshot{}, err
	}
	if err := s.store.SetCheckpointChecked(context.WithoutCancel(ctx), src.ID, s.now()); err != nil {
		s.log.Warn("fork: record the checkpoint check", "workspace", src.ID, "err", err)
	}
	return snap, nil
}

// Fork makes N ready workspaces from one receipt of a workspace, each as `snapshot restore` makes
// one (its own allocation, epoch and session); a project workspace's forks each get their own
// branch. All or nothing: if any fork fails, the ones made are removed and the error names every
// failure.
func (s *Server) Fork(ctx context.Context, idOrName string, req api.ForkRequest) (api.ForkResult, error) {
	p, err := s.planFork(ctx, idOrName, req)
	if err != nil {
		return api.ForkResult{}, err
	}
	snap, err := s.forkSource(ctx, p.src, req.From)
	if err != nil {
		return api.ForkResult{}, err
	}
	made := make([]api.Workspace, len(p.names))
	errs := make([]error, len(p.names))
	sem := make(chan struct{}, forkConcurrency)
	var wg sync.WaitGroup
	for i, name := range p.names {
		wg.Add(1)
		started := s.routines.Go("fork "+name, func(rctx context.Context) {
			defer wg.Done()
			// The request's context, ended early too when the controller stops.
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stop := context.AfterFunc(rctx, cancel)
			defer stop()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			made[i], errs[i] = s.forkOne(ctx, p, snap, name)
		})
		if !started {
			wg.Done()
			errs[i] = protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")
		}
	}
	wg.Wait()
	var failed []string
	var first error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %s", p.names[i], protocol.AsError(err).Error()))
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		removed := 0
		for _, ws := range made {
			if ws.ID == "" {
				continue
			}
			if err := s.DeleteWorkspace(context.WithoutCancel(ctx), ws.ID); err != nil {
				s.log.Error("remove a fork of a failed fork", "workspace", ws.ID, "err", err)
				continue
			}
			removed++
		}
		return api.ForkResult{}, protocol.Errorf(protocol.CodeOf(first), "fork of %s from %s: %d of %d failed (%s); the %d made were removed",
			p.src.Name, snap.ID, len(failed), len(p.names), strings.Join(failed, "; "), removed)
	}
	return api.ForkResult{Snapshot: snap, Workspaces: made}, nil
}

// forkOne restores snap into a new workspace called name and, for a project workspace, moves it
// onto its own branch. On failure the returned workspace, if its ID is set, was made and must be
// removed.
func (s *Server) forkOne(ctx context.Context, p forkPlan, snap api.Snapshot, name string) (api.Workspace, error) {
	res, err := s.RestoreSnapshot(ctx, snap.ID, api.RestoreRequest{Name: name, Provider: p.provider})
	if err != nil {
		return api.Workspace{}, err
	}
	ws := res.Workspace
	if p.src.CheckpointEvery != nil {
		every := time.Duration(*p.src.CheckpointEvery)
		if err := s.store.SetCheckpointEvery(ctx, ws.ID, &every); err != nil {
			return ws, err
		}
	}
	if p.src.IdlePolicy != nil {
		// The source's own idle policy too: a fork of a workspace meant to sleep sleeps.
		if err := s.store.SetIdlePolicy(ctx, ws.ID, p.src.IdlePolicy); err != nil {
			return ws, err
		}
	}
	if p.src.Git != nil {
		g := *p.src.Git
		g.Branch = ForkBranchPrefix + name
		c, err := s.runnerFor(ctx, ws.ID)
		if err != nil {
			return ws, err
		}
		var st protocol.GitStatus
		if err := c.Call(ctx, protocol.OpGitBranch, ws.Epoch, protocol.GitBranchArgs{Branch: g.Branch}, &st); err != nil {
			return ws, fmt.Errorf("move onto branch %s: %w", g.Branch, err)
		}
		if st.Branch != g.Branch {
			return ws, protocol.Errorf(protocol.CodeCorrupt, "the runner reports branch %q after moving onto %q", st.Branch, g.Branch)
		}
		if err := s.store.SetWorkspaceGit(ctx, ws.ID, &g); err != nil {
			return ws, err
		}
	}
	return s.workspace(ctx, ws.ID)
}
