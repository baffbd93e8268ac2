package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

const (
	// DefaultSaveWait is how long create --wait-for-save waits for the parent's next receipt
	// when the request names no wait; MaxSaveWait is the most a request may ask for.
	DefaultSaveWait = 10 * time.Minute
	MaxSaveWait     = time.Hour
	// saveRecheck is how often a waiter reads the parent again besides being woken: a receipt
	// another controller of the cluster wrote wakes no one here.
	saveRecheck = time.Second
)

// saveCanCome lists the states in which a workspace has, or is about to have, a writer that can
// save: a wait for its next receipt is worth starting, or continuing, only in these. A stopped
// workspace counts: its kept sandbox holds the work, and a start (or a close, which starts it
// to save) brings its writer back.
var saveCanCome = []api.WorkspaceState{api.StateProvisioning, api.StateReady, api.StateClosing, api.StateReopening,
	api.StateStopping, api.StateStopped, api.StateStarting, api.StateRecovering}

// childSpec is what a child is made with besides its parent's receipt.
type childSpec struct {
	name, provider, branch string
	options                map[string]string
	every                  *protocol.Duration // nil: the parent's
	idle                   *api.IdlePolicy    // nil: the parent's own policy
}

// createChild makes a child of req.FromWorkspace: a new workspace with its own allocation,
// lease and epoch, continuing the parent's files from a receipt of the parent (its last, the
// one named, or, with WaitForSave, the next one it makes). Everything that can be refused is
// refused before the wait and before anything is made.
func (s *Server) createChild(ctx context.Context, req api.CreateWorkspaceRequest) (api.Workspace, error) {
	parent, spec, wait, err := s.planChild(ctx, req)
	if err != nil {
		return api.Workspace{}, err
	}
	var snap api.Snapshot
	switch {
	case req.WaitForSave:
		snap, err = s.waitForSave(ctx, parent, spec.name, wait)
	case req.FromSnapshot != "":
		snap, err = s.receiptOf(ctx, parent, req.FromSnapshot)
	default:
		snap, err = s.lastReceiptOf(ctx, parent)
	}
	if err != nil {
		return api.Workspace{}, err
	}
	child, err := s.restoreChild(ctx, parent, snap, spec)
	if err != nil {
		if child.ID != "" {
			if derr := s.DeleteWorkspace(context.WithoutCancel(ctx), child.ID); derr != nil {
				s.log.Error("remove a child that could not be finished", "workspace", child.ID, "err", derr)
			}
		}
		return api.Workspace{}, err
	}
	return child, nil
}

// planChild checks a child's request against its parent and the controller, changing nothing,
// and returns the parent, the child's spec and how long a wait may last.
func (s *Server) planChild(ctx context.Context, req api.CreateWorkspaceRequest) (api.Workspace, childSpec, time.Duration, error) {
	bad := func(format string, args ...any) (api.Workspace, childSpec, time.Duration, error) {
		return api.Workspace{}, childSpec{}, 0, protocol.Errorf(protocol.CodeInvalidArgument, format, args...)
	}
	switch {
	case req.FromWorkspace == "":
		return bad("from_snapshot, wait_for_save and wait_timeout need from_workspace (--from WS)")
	case req.Project != "" || req.Mode != "" || len(req.Provision) > 0 || len(req.Teardown) > 0:
		return bad("--from continues its parent's checkout: --project, --mode, --provision and --teardown do not apply")
	case req.WaitForSave && req.FromSnapshot != "":
		return bad("--wait-for-save waits for the parent's next receipt; --from-snapshot names one: choose one")
	case req.WaitTimeout != nil && !req.WaitForSave:
		return bad("--wait-timeout needs --wait-for-save")
	}
	wait := DefaultSaveWait
	if req.WaitTimeout != nil {
		wait = time.Duration(*req.WaitTimeout)
		if wait <= 0 || wait > MaxSaveWait {
			return bad("wait timeout %s: must be more than 0 and at most %s", wait, MaxSaveWait)
		}
	}
	if req.CheckpointEvery != nil {
		if err := CheckEvery(time.Duration(*req.CheckpointEvery)); err != nil {
			return api.Workspace{}, childSpec{}, 0, err
		}
	}
	parent, err := s.workspace(ctx, req.FromWorkspace)
	if err == nil && parent.State == api.StateDeleted {
		err = protocol.Errorf(protocol.CodeNotFound, "workspace %q was deleted", req.FromWorkspace)
	}
	if err != nil {
		return api.Workspace{}, childSpec{}, 0, err
	}
	if req.Branch != "" && parent.Git == nil {
		return bad("--branch names a child's branch; workspace %s is not a project workspace", parent.ID)
	}
	idle, err := idleChoice(req.IdleStop, req.IdleClose, false, false)
	if err != nil {
		return api.Workspace{}, childSpec{}, 0, err
	}
	spec := childSpec{name: req.Name, provider: req.Provider, branch: req.Branch, options: req.Options, every: req.CheckpointEvery, idle: idle}
	if spec.provider == "" {
		spec.provider = parent.Provider
	}
	// The child's name and provider are checked now, not after a wait of minutes (a name taken
	// meanwhile is refused when the child is recorded).
	if spec.name != "" {
		if err := checkName("workspace", spec.name, ""); err != nil {
			return api.Workspace{}, childSpec{}, 0, err
		}
		if _, err := s.store.GetWorkspace(ctx, spec.name); err == nil {
			return api.Workspace{}, childSpec{}, 0, protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", spec.name)
		} else if protocol.CodeOf(err) != protocol.CodeNotFound {
			return api.Workspace{}, childSpec{}, 0, err
		}
	}
	if _, err := s.providerFor(ctx, spec.provider); err != nil {
		return api.Workspace{}, childSpec{}, 0, err
	}
	return parent, spec, wait, nil
}

// receiptOf is the receipt id of workspace ws, refused when it is another workspace's or its
// object was reclaimed.
func (s *Server) receiptOf(ctx context.Context, ws api.Workspace, id string) (api.Snapshot, error) {
	snap, err := s.snapshot(ctx, id)
	if err != nil {
		return snap, err
	}
	if snap.WorkspaceID != ws.ID {
		return api.Snapshot{}, protocol.Errorf(protocol.CodeInvalidArgument, "snapshot %s is not a receipt of workspace %s", snap.ID, ws.ID)
	}
	if snap.ReclaimedAt != nil {
		return api.Snapshot{}, protocol.Errorf(protocol.CodeConflict, "snapshot %s was reclaimed by gc; its object is gone", snap.ID)
	}
	return snap, nil
}

// lastReceiptOf is the newest receipt of ws; none is a refusal that says how to make one.
func (s *Server) lastReceiptOf(ctx context.Context, ws api.Workspace) (api.Snapshot, error) {
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		return api.Snapshot{}, err
	}
	if last == nil {
		return api.Snapshot{}, protocol.Errorf(protocol.CodeConflict,
			"workspace %s has no receipt to continue from; save it first (\"tether snapshot create %s\") or wait for its next save (--wait-for-save)",
			ws.ID, ws.ID)
	}
	return s.receiptOf(ctx, ws, last.ID)
}

// waitForSave waits, at most wait, for the first receipt of parent written after the wait began
// (a checkpoint, a snapshot, a close's save) and returns it. It holds nothing while it waits:
// no allocation, no lease, no lock. A parent that can no longer save (closed without a new
// receipt, deleted, failed) ends the wait with a refusal, as does the end of ctx.
func (s *Server) waitForSave(ctx context.Context, parent api.Workspace, child string, wait time.Duration) (api.Snapshot, error) {
	if !slices.Contains(saveCanCome, parent.State) {
		return api.Snapshot{}, s.noSaveComing(ctx, parent)
	}
	// Registered before the receipts are read: a receipt written from here on wakes the wait.
	changed, release := s.signals.next(parent.ID)
	defer func() { release() }()
	before, err := s.store.ListSnapshots(ctx, parent.ID)
	if err != nil {
		return api.Snapshot{}, err
	}
	known := make(map[string]bool, len(before))
	for _, snap := range before {
		known[snap.ID] = true
	}
	if child == "" {
		child = "(unnamed)"
	}
	timer := s.cfg.Clock.NewTimer(wait)
	defer timer.Stop()
	recheck := s.cfg.Clock.NewTicker(saveRecheck)
	defer recheck.Stop()
	// The event is how a watcher (and a test) sees the wait registered, its deadline set,
	// before the save.
	s.recordEvent(ctx, parent.ID, fmt.Sprintf("child %s waits for the next save (at most %s)", child, wait))
	gaveUp := func(err error) (api.Snapshot, error) {
		s.recordEvent(context.WithoutCancel(ctx), parent.ID, fmt.Sprintf("child %s stopped waiting: %s", child, protocol.AsError(err).Message))
		return api.Snapshot{}, err
	}
	for {
		select {
		case <-changed:
		case <-recheck.Chan():
		case <-timer.Chan():
			return gaveUp(protocol.Errorf(protocol.CodeTimeout, "workspace %s made no new receipt within %s; no child was made", parent.ID, wait))
		case <-ctx.Done():
			err := protocol.Errorf(protocol.CodeCanceled, "the wait for a save of workspace %s ended: %v", parent.ID, ctx.Err())
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				err.Code = protocol.CodeTimeout
			}
			return gaveUp(err)
		}
		release()
		changed, release = s.signals.next(parent.ID)
		list, err := s.store.ListSnapshots(ctx, parent.ID)
		if err != nil {
			return gaveUp(err)
		}
		if n := len(list); n > 0 && !known[list[n-1].ID] {
			return s.receiptOf(ctx, parent, list[n-1].ID)
		}
		cur, err := s.store.GetWorkspace(ctx, parent.ID)
		if err != nil {
			return gaveUp(err)
		}
		if !slices.Contains(saveCanCome, cur.State) {
			return gaveUp(s.noSaveComing(ctx, cur))
		}
	}
}

// noSaveComing refuses a wait for the next save of a workspace that has no writer to make one.
func (s *Server) noSaveComing(ctx context.Context, ws api.Workspace) error {
	hint := ""
	if last, err := s.lastReceipt(ctx, ws.ID); err == nil && last != nil && ws.State != api.StateDeleted {
		hint = fmt.Sprintf("; its last receipt %s holds its work: create the child without --wait-for-save", last.ID)
	}
	return protocol.Errorf(protocol.CodeConflict, "workspace %s is %s: no writer will save it%s", ws.ID, ws.State, hint)
}

// restoreChild restores snap, a receipt of parent, into a new workspace as `snapshot restore`
// makes one (its own allocation, epoch and session), records its lineage, keeps the parent's
// checkpoint interval unless spec sets one and, for a project workspace, moves it onto a branch
// of its own (spec.branch, default tether/NAME). On failure the returned workspace, if its ID is
// set, was made and must be removed.
func (s *Server) restoreChild(ctx context.Context, parent api.Workspace, snap api.Snapshot, spec childSpec) (api.Workspace, error) {
	res, err := s.RestoreSnapshot(ctx, snap.ID, api.RestoreRequest{Name: spec.name, Provider: spec.provider, Options: spec.options})
	if err != nil {
		return api.Workspace{}, err
	}
	ws := res.Workspace
	if err := s.store.SetWorkspaceParent(ctx, ws.ID, parent.ID, snap.ID); err != nil {
		return ws, err
	}
	every := spec.every
	if every == nil {
		every = parent.CheckpointEvery
	}
	if every != nil {
		d := time.Duration(*every)
		if err := s.store.SetCheckpointEvery(ctx, ws.ID, &d); err != nil {
			return ws, err
		}
	}
	// A child of a workspace meant to sleep sleeps too, unless it was given its own policy.
	idle := spec.idle
	if idle == nil {
		idle = parent.IdlePolicy
	}
	if idle != nil {
		if err := s.store.SetIdlePolicy(ctx, ws.ID, idle); err != nil {
			return ws, err
		}
	}
	if parent.Git != nil {
		g := *parent.Git
		g.Branch = spec.branch
		if g.Branch == "" {
			g.Branch = ForkBranchPrefix + ws.Name
		}
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
	s.recordEvent(ctx, ws.ID, fmt.Sprintf("created from workspace %s (%s) at receipt %s", parent.ID, parent.Name, snap.ID))
	s.recordEvent(ctx, parent.ID, fmt.Sprintf("child %s (%s) made from receipt %s", ws.ID, ws.Name, snap.ID))
	return s.workspace(ctx, ws.ID)
}

// recordEvent records an event that changes no state; a failure to is logged, not returned: the
// history is not worth undoing the work it describes.
func (s *Server) recordEvent(ctx context.Context, id, cause string) {
	if err := s.store.RecordEvent(ctx, id, cause); err != nil {
		s.log.Warn("record event", "workspace", id, "cause", cause, "err", err)
	}
}
