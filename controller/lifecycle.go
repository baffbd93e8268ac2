package controller

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// lastReceipt is the workspace's newest snapshot, if any.
func (s *Server) lastReceipt(ctx context.Context, wsID string) (*api.Snapshot, error) {
	list, err := s.store.ListSnapshots(ctx, wsID)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return &list[len(list)-1], nil
}

// closeCheck reports what closing would do, changing nothing. Pending changes are decided by
// walking the live tree as a capture would and comparing its digest with the last receipt's.
func (s *Server) closeCheck(ctx context.Context, ws api.Workspace) (api.CloseCheck, error) {
	chk := api.CloseCheck{Reasons: []string{}}
	running, err := s.store.RunningRuns(ctx, ws.AllocationID)
	if err != nil {
		return chk, err
	}
	chk.ActiveRuns = len(running)
	if chk.ActiveRuns > 0 {
		chk.Reasons = append(chk.Reasons, fmt.Sprintf("%d run(s) still active", chk.ActiveRuns))
	}
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		return chk, err
	}
	if last != nil {
		chk.LastSnapshot = last.ID
	}
	if ws.State == api.StateStopped {
		chk.Ready = true
		a, err := s.store.GetAllocation(ctx, ws.AllocationID)
		if err != nil {
			return chk, err
		}
		chk.PendingChanges = last == nil || a.StoppedTree == "" || last.Summary.Tree != a.StoppedTree
		chk.Reasons = append(chk.Reasons, "workspace is stopped: close starts it first, then checks and saves its changes")
		return chk, nil
	}
	if ws.State != api.StateReady {
		chk.Reasons = append(chk.Reasons, "workspace is "+string(ws.State))
		return chk, nil
	}
	c, err := s.runnerFor(ctx, ws.ID)
	if err != nil {
		chk.Reasons = append(chk.Reasons, "runner not connected: changes cannot be checked or saved")
		return chk, nil
	}
	if chk.ActiveServices, err = activeServices(ctx, c); err != nil {
		return chk, err
	}
	if chk.ActiveServices > 0 {
		chk.Reasons = append(chk.Reasons, fmt.Sprintf("%d service(s) running: close stops them (verified) before its final save", chk.ActiveServices))
	}
	blocked := false
	chk.PendingChanges, err = s.treeChanged(ctx, ws, c, last)
	switch {
	case protocol.CodeOf(err) == protocol.CodeChangedDuringCapture:
		// Something is writing: there are changes by definition, and close saves them once its
		// runs and services have stopped.
		chk.PendingChanges = true
		chk.Reasons = append(chk.Reasons, "the tree is being written to: "+protocol.AsError(err).Message)
	case protocol.CodeOf(err) == protocol.CodeReservedName:
		// Unsaved by definition, and no capture can save it as it is: close refuses.
		chk.PendingChanges, blocked = true, true
		chk.Reasons = append(chk.Reasons, "cannot be saved: "+protocol.AsError(err).Message)
	case err != nil:
		return chk, err
	}
	if chk.PendingChanges {
		chk.Reasons = append(chk.Reasons, "changes since the last snapshot: close captures one first")
	}
	chk.Ready = chk.ActiveRuns == 0 && !blocked
	return chk, nil
}

// treeChanged walks the live tree as a capture would and compares its digest with last's.
func (s *Server) treeChanged(ctx context.Context, ws api.Workspace, c *hub.Conn, last *api.Snapshot) (bool, error) {
	var digest protocol.SnapshotSummary
	args := protocol.SnapshotCaptureArgs{WorkspaceID: ws.ID}
	if last != nil {
		// The runner's capture cache spares reading what it proves unchanged since the last
		// receipt; the tree digest is the same with refs (snapshot.TreeDigest).
		args.Parent, args.Incremental = last.ID, true
	}
	if err := c.Call(ctx, protocol.OpTreeDigest, 0, args, &digest); err != nil {
		return false, err
	}
	return last == nil || last.Summary.Tree == "" || last.Summary.Tree != digest.Tree, nil
}

func (s *Server) handleClose(w http.ResponseWriter, r *http.Request) {
	var req api.CloseRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Check {
		chk, err := s.closeCheck(r.Context(), ws)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, chk)
		return
	}
	res, err := s.CloseWorkspace(r.Context(), ws, req.CancelRuns)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// CloseWorkspace saves the workspace and releases its sandbox. Nothing is lost: if the tree
// changed since the last receipt, a snapshot is captured and verified first, and if that fails
// the close is refused and nothing is released.
//
// A stopped workspace is started first (its unsaved work is in its stopped sandbox, and only
// its runner can read and save it), then closed; a close refused after that leaves it ready.
func (s *Server) CloseWorkspace(ctx context.Context, ws api.Workspace, cancelRuns bool) (api.CloseResult, error) {
	if ws.State == api.StateStopped {
		started, err := s.StartWorkspace(ctx, ws.ID)
		if err != nil {
			return api.CloseResult{}, fmt.Errorf("close: start the stopped workspace to save its work: %w", err)
		}
		ws = started
	}
	if ws.State != api.StateReady {
		return api.CloseResult{}, protocol.Errorf(protocol.CodeConflict, "workspace %s is %s; only a ready workspace closes", ws.ID, ws.State)
	}
	chk, err := s.closeCheck(ctx, ws)
	if err != nil {
		return api.CloseResult{}, err
	}
	if chk.ActiveRuns > 0 && !cancelRuns {
		return api.CloseResult{}, protocol.Errorf(protocol.CodeConflict, "workspace %s has %d active run(s); pass --cancel-runs to kill them", ws.ID, chk.ActiveRuns)
	}
	c, err := s.reach(ctx, ws.AllocationID)
	if err != nil {
		return api.CloseResult{}, protocol.Errorf(protocol.CodeUnavailable, "workspace %s: its changes cannot be saved: %s", ws.ID, protocol.AsError(err).Message)
	}
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartClose, "", "close"); err != nil {
		return api.CloseResult{}, err
	}
	back := func(err error) (api.CloseResult, error) {
		s.unquiesce(ctx, ws, c)
		_ = s.store.TransitionWorkspace(context.WithoutCancel(ctx), ws.ID, wsstate.RefuseClose, "", "close refused: "+protocol.AsError(err).Message)
		return api.CloseResult{}, err
	}
	// Nothing may write after the last capture: every run and service stops first, verified,
	// and a close that cannot stop them keeps the sandbox.
	q, err := s.quiesce(ctx, ws, c, quiesceForClose)
	if err != nil {
		return back(err)
	}
	res := api.CloseResult{Saved: chk.LastSnapshot, StoppedRuns: len(q.Runs), StoppedServices: len(q.Services)}
	// What the stopped processes wrote last is only in the tree now, not in the check's digest.
	pending := chk.PendingChanges
	if !pending && (res.StoppedRuns > 0 || res.StoppedServices > 0) {
		last, err := s.lastReceipt(ctx, ws.ID)
		if err == nil {
			pending, err = s.treeChanged(ctx, ws, c, last)
		}
		if err != nil {
			return back(fmt.Errorf("close: check the tree after stopping its processes: %w", err))
		}
	}
	if pending {
		snap, err := s.captureWorkspace(ctx, ws)
		if err != nil {
			return back(fmt.Errorf("close: capture: %w", err))
		}
		if _, err := s.verifySnapshot(ctx, snap); err != nil {
			return back(fmt.Errorf("close: verify %s: %w", snap.ID, err))
		}
		res.Snapshot, res.Saved = &snap, snap.ID
	}
	// The work is saved: a teardown command may run again (it changes nothing that is kept).
	s.unquiesce(ctx, ws, c)
	// Teardown runs once the work is saved, so a teardown command can never cost work; what it
	// changes in the tree goes with the sandbox.
	s.teardown(ctx, ws)
	if err := s.releaseAllocation(context.WithoutCancel(ctx), ws); err != nil {
		return back(err)
	}
	// Every writer of the released allocation is fenced from here on.
	if _, err := s.store.BumpEpoch(context.WithoutCancel(ctx), ws.ID); err != nil {
		return api.CloseResult{}, err
	}
	if err := s.store.TransitionWorkspace(context.WithoutCancel(ctx), ws.ID, wsstate.FinishClose, "", "closed, saved in "+res.Saved); err != nil {
		return api.CloseResult{}, err
	}
	ws, err = s.workspace(context.WithoutCancel(ctx), ws.ID)
	res.Workspace = ws
	return res, err
}

// releaseAllocation revokes the runner's session and destroys the sandbox.
func (s *Server) releaseAllocation(ctx context.Context, ws api.Workspace) error {
	a, err := s.store.GetAllocation(ctx, ws.AllocationID)
	if err != nil {
		return err
	}
	// Checked before anything changes: a sandbox whose host is gone cannot be destroyed, and
	// the workspace is not reported released while its sandbox runs on.
	if _, _, err := s.placedElsewhere(ctx, a); err != nil {
		return err
	}
	if err := s.store.UpdateAllocation(ctx, ws.AllocationID, store.AllocDestroyed, "", ""); err != nil {
		return err
	}
	s.disconnect(ctx, ws.AllocationID)
	if err := s.destroySandbox(ctx, a); err != nil {
		return err
	}
	// Runs the sandbox took with it can never report.
	running, err := s.store.RunningRuns(ctx, ws.AllocationID)
	if err == nil {
		for _, run := range running {
			_ = s.store.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunLost, Error: "killed when the workspace closed", At: s.now()})
		}
	}
	return nil
}

func (s *Server) handleReopen(w http.ResponseWriter, r *http.Request) {
	var req api.ReopenRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	ws, err := s.ReopenWorkspace(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// ReopenWorkspace gives a closed workspace a fresh allocation, restores its last receipt there
// and starts a new writer epoch. On failure the new allocation is destroyed and the workspace
// stays closed, with the reason.
func (s *Server) ReopenWorkspace(ctx context.Context, idOrName string, req api.ReopenRequest) (api.Workspace, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return ws, err
	}
	// A reclaim of the workspace's old receipts finishes first — this reopen finishes one a sweep
	// left half done — so nothing half-reclaimed is ever restored from.
	if ws.State == api.StateReclaiming {
		if ws, err = s.finishReclaim(ctx, ws.ID); err != nil {
			return ws, err
		}
	}
	if ws.State != api.StateClosed {
		return ws, protocol.Errorf(protocol.CodeConflict, "workspace %s is %s; only a closed workspace reopens", ws.ID, ws.State)
	}
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		return ws, err
	}
	if req.Provider == "" {
		req.Provider = ws.Provider
	}
	prov, err := s.providerFor(ctx, req.Provider)
	if err != nil {
		return ws, err
	}
	// Atomic: a concurrent sweep or another reopen either sees reopening or has already moved
	// the workspace. A sweep that started reclaiming meanwhile is waited for (it holds the sweep
	// lock), then the reopen goes on; another reopen wins and this one is refused.
	for {
		err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartReopen, "", "reopen on provider "+req.Provider)
		if err == nil {
			break
		}
		cur, gerr := s.workspace(ctx, ws.ID)
		if protocol.CodeOf(err) != protocol.CodeConflict || gerr != nil || cur.State != api.StateReclaiming {
			return ws, err
		}
		if _, err := s.finishReclaim(ctx, ws.ID); err != nil {
			return ws, err
		}
	}
	return s.rebuild(ctx, ws, req.Provider, prov, last, rebuildSteps{finish: wsstate.FinishReopen, fail: wsstate.FailReopen,
		done: func(alloc string) string { return "reopened on allocation " + alloc }, failed: "reopen failed"})
}

// rebuildSteps are the transitions and event causes of a rebuild: done names the new
// allocation in the finishing event's cause, failed is the failing one's.
type rebuildSteps struct {
	finish, fail wsstate.Event
	done         func(allocationID string) string
	failed       string
}

// rebuild gives ws (in the state its caller moved it to) a fresh allocation on the named
// provider, restores from onto it (nothing when nil: an empty tree) and starts a new writer
// epoch, then makes steps.finish. On failure the new allocation is destroyed and steps.fail
// puts the workspace back, with the reason.
func (s *Server) rebuild(ctx context.Context, ws api.Workspace, name string, prov provider.Provider, from *api.Snapshot, steps rebuildSteps) (api.Workspace, error) {
	now := s.now()
	token := newToken(prefixBootstrap)
	alloc := store.Allocation{ID: newID("al_"), WorkspaceID: ws.ID, Provider: name, State: store.AllocStarting,
		BootstrapHash: hashToken(token), CreatedAt: now, UpdatedAt: now, PlacedOn: s.id, ReadyBy: s.readyBy(now)}
	fail := func(err error) (api.Workspace, error) {
		bg := context.WithoutCancel(ctx)
		cur, _ := s.workspace(bg, ws.ID)
		if cur.AllocationID == alloc.ID {
			_ = s.releaseAllocation(bg, cur)
		}
		_ = s.store.TransitionWorkspace(bg, ws.ID, steps.fail, protocol.AsError(err).Message, steps.failed)
		return ws, err
	}
	if err := s.store.AddAllocation(ctx, alloc); err != nil {
		return fail(err)
	}
	ws.AllocationID, ws.Provider = alloc.ID, name
	if err := s.startAllocation(ctx, prov, ws, token); err != nil {
		return fail(err)
	}
	epoch, err := s.store.BumpEpoch(ctx, ws.ID)
	if err != nil {
		return fail(err)
	}
	c, ok := s.runnerOf(ctx, alloc.ID)
	if !ok {
		return fail(protocol.Errorf(protocol.CodeUnavailable, "the new runner disconnected"))
	}
	if from != nil {
		if err := s.restoreInto(ctx, c, *from, epoch); err != nil {
			return fail(err)
		}
	}
	if err := s.store.TransitionWorkspace(ctx, ws.ID, steps.finish, "", steps.done(alloc.ID)); err != nil {
		return fail(err)
	}
	s.pushEpoch(ctx, ws, epoch)
	return s.workspace(ctx, ws.ID)
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	evs, err := s.store.ListEvents(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, evs)
}
