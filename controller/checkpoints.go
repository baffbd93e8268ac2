package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// checkpointTick is how often the checkpoint loop looks for workspaces that are due: the
// resolution of every interval.
const checkpointTick = time.Second

// MinCheckpointEvery is the shortest interval a workspace or the controller may set: a shorter
// one would have the controller capture all the time (an agent's token may set its own).
const MinCheckpointEvery = time.Second

// errTreeUnchanged answers a checkpoint capture whose tree is the newest receipt's; no receipt
// was written and the object is gone.
var errTreeUnchanged = errors.New("the tree is the newest receipt's")

// unchangedSince returns the newest of prev when its tree is tree.
func unchangedSince(prev []api.Snapshot, tree string) *api.Snapshot {
	if len(prev) == 0 || tree == "" || prev[len(prev)-1].Summary.Tree != tree {
		return nil
	}
	last := prev[len(prev)-1]
	return &last
}

// busySet counts what this controller is doing to each workspace's tree (captures, restores):
// a checkpoint finding one skips its turn instead of waiting behind it.
type busySet struct {
	mu sync.Mutex
	n  map[string]int
}

// hold marks id busy until release is called.
func (b *busySet) hold(id string) (release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[string]int{}
	}
	b.n[id]++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.n[id]--; b.n[id] <= 0 {
			delete(b.n, id)
		}
	}
}

// tryHold is hold unless id is busy already.
func (b *busySet) tryHold(id string) (release func(), ok bool) {
	b.mu.Lock()
	busy := b.n[id] > 0
	b.mu.Unlock()
	if busy {
		return nil, false
	}
	return b.hold(id), true
}

// checkpointInterval is the interval in force for ws: its own, else the controller's default.
func (s *Server) checkpointInterval(ws api.Workspace) time.Duration {
	if ws.CheckpointEvery != nil {
		return time.Duration(*ws.CheckpointEvery)
	}
	return s.cfg.CheckpointEvery
}

// withCheckpoint fills the interval in force into ws, for the API.
func (s *Server) withCheckpoint(ws api.Workspace) api.Workspace {
	ws.CheckpointInterval = protocol.Duration(s.checkpointInterval(ws))
	return ws
}

// CheckEvery refuses an interval that is neither 0 (off) nor at least MinCheckpointEvery.
func CheckEvery(d time.Duration) error {
	if d != 0 && d < MinCheckpointEvery {
		return protocol.Errorf(protocol.CodeInvalidArgument, "checkpoint interval %s: must be 0 (off) or at least %s", d, MinCheckpointEvery)
	}
	return nil
}

func (s *Server) handleUpdateWorkspace(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateWorkspaceRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	ws, err := s.UpdateWorkspace(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// UpdateWorkspace changes a workspace's settings (its checkpoint interval, its idle policy).
// Everything asked is checked before anything changes.
func (s *Server) UpdateWorkspace(ctx context.Context, idOrName string, req api.UpdateWorkspaceRequest) (api.Workspace, error) {
	if req.CheckpointDefault && req.CheckpointEvery != nil {
		return api.Workspace{}, protocol.Errorf(protocol.CodeInvalidArgument, "checkpoint_every and checkpoint_default exclude each other")
	}
	idle, err := idleChoice(req.IdleStop, req.IdleClose, req.IdleDefault, req.IdleOff)
	if err != nil {
		return api.Workspace{}, err
	}
	idleSet := idle != nil || req.IdleDefault
	if req.CheckpointEvery == nil && !req.CheckpointDefault && !idleSet {
		return api.Workspace{}, protocol.Errorf(protocol.CodeInvalidArgument, "nothing to change")
	}
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return ws, err
	}
	if ws.State == api.StateDeleted {
		return ws, protocol.Errorf(protocol.CodeConflict, "workspace %s was deleted", ws.ID)
	}
	var every *time.Duration
	if req.CheckpointEvery != nil {
		d := time.Duration(*req.CheckpointEvery)
		if err := CheckEvery(d); err != nil {
			return ws, err
		}
		every = &d
	}
	if req.CheckpointEvery != nil || req.CheckpointDefault {
		if err := s.store.SetCheckpointEvery(ctx, ws.ID, every); err != nil {
			return ws, err
		}
	}
	if idleSet {
		if err := s.store.SetIdlePolicy(ctx, ws.ID, idle); err != nil {
			return ws, err
		}
	}
	return s.workspace(ctx, ws.ID)
}

// checkpointLoop takes each workspace's checkpoint when its interval has passed, until ctx (the
// controller's routines') is done. It runs on the injected clock.
func (s *Server) checkpointLoop(ctx context.Context) {
	s.passLoop(ctx, checkpointTick, s.checkpointPass, func() {
		if s.checkpointPassed != nil {
			s.checkpointPassed()
		}
	})
}

// checkpointPass starts the checkpoint of every workspace that is due, each in a routine of its
// own (one slow capture holds up no other workspace), and waits for them.
func (s *Server) checkpointPass(ctx context.Context) {
	list, err := s.store.ListWorkspaces(ctx, false)
	if err != nil {
		s.log.Warn("checkpoint: list workspaces", "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, ws := range list {
		if ctx.Err() != nil {
			break
		}
		release, due := s.checkpointDue(ctx, ws)
		if !due {
			continue
		}
		wg.Add(1)
		if !s.routines.Go("checkpoint "+ws.ID, func(ctx context.Context) {
			defer wg.Done()
			defer release()
			s.takeCheckpoint(ctx, ws)
		}) {
			wg.Done()
			release()
		}
	}
	wg.Wait()
}

// checkpointDue says whether this controller should take ws's checkpoint now, holding the
// workspace busy if so. A workspace that is due but cannot be checkpointed (busy, or its runner
// disconnected) has its turn recorded as skipped, so it is looked at again an interval later.
func (s *Server) checkpointDue(ctx context.Context, ws api.Workspace) (release func(), due bool) {
	every := s.checkpointInterval(ws)
	if every <= 0 {
		return nil, false
	}
	switch ws.State {
	case api.StateReady:
	case api.StateProvisioning, api.StateClosing, api.StateReopening, api.StateStopping, api.StateStarting:
		// In the middle of a change this controller or another is making: not yet, and nothing
		// to record (a closing workspace is saved by its close).
		return nil, false
	default:
		// closed, failed, reclaiming: nothing live to save; stopped: nothing runs that could
		// change the kept tree, and no runner to read it (the next turn after a start saves it).
		return nil, false
	}
	now := s.now()
	since := ws.CreatedAt
	if ws.LastCheckpointAt != nil && ws.LastCheckpointAt.After(since) {
		since = *ws.LastCheckpointAt
	}
	if now.Before(since.Add(every)) {
		return nil, false
	}
	// Only the controller holding the runner's connection takes the checkpoint, so a cluster
	// takes each workspace's once.
	if _, ok := s.hub.Get(ws.AllocationID); !ok {
		if s.connected(ctx, ws.AllocationID) {
			return nil, false // another controller's
		}
		// No one holds it: the controller that placed it records the skip, once.
		if a, err := s.store.GetAllocation(ctx, ws.AllocationID); err != nil || (a.PlacedOn != "" && a.PlacedOn != s.id) {
			return nil, false
		}
		s.skipCheckpoint(ctx, ws, now, "the runner is not connected")
		return nil, false
	}
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		s.log.Warn("checkpoint: read receipts", "workspace", ws.ID, "err", err)
		return nil, false
	}
	if last != nil && last.CreatedAt.After(since) && now.Before(last.CreatedAt.Add(every)) {
		return nil, false // a receipt made since counts as one
	}
	release, ok := s.busy.tryHold(ws.ID)
	if !ok {
		s.skipCheckpoint(ctx, ws, now, "a capture or restore of the workspace is in progress")
		return nil, false
	}
	return release, true
}

// skipCheckpoint records a turn that was not taken: the check time (the next turn is an interval
// later), an event and a log line. The workspace itself is untouched.
func (s *Server) skipCheckpoint(ctx context.Context, ws api.Workspace, now time.Time, why string) {
	s.log.Info("checkpoint skipped", "workspace", ws.ID, "reason", why)
	if err := s.store.SetCheckpointChecked(ctx, ws.ID, now); err != nil {
		s.log.Warn("checkpoint: record the check", "workspace", ws.ID, "err", err)
	}
	if err := s.store.RecordEvent(ctx, ws.ID, "checkpoint skipped: "+why); err != nil {
		s.log.Warn("checkpoint: record event", "workspace", ws.ID, "err", err)
	}
}

// takeCheckpoint captures ws as a checkpoint: a receipt when the tree changed since the newest
// receipt, none when it did not. Whatever happens, the workspace is left as it was; a failure
// is a skipped turn.
func (s *Server) takeCheckpoint(ctx context.Context, ws api.Workspace) {
	snap, err := s.captureWorkspaceAs(ctx, ws, captureOpts{checkpoint: true})
	now := s.now()
	switch {
	case err == nil:
		s.log.Info("checkpoint", "workspace", ws.ID, "snapshot", snap.ID, "bytes", snap.Bytes)
	case errors.Is(err, errTreeUnchanged):
		s.log.Debug("checkpoint: tree unchanged", "workspace", ws.ID, "snapshot", snap.ID)
	case ctx.Err() != nil:
		return // the controller is stopping: the turn is taken again by whoever runs next
	default:
		s.skipCheckpoint(context.WithoutCancel(ctx), ws, now, fmt.Sprintf("capture: %s", protocol.AsError(err).Error()))
		return
	}
	if err := s.store.SetCheckpointChecked(context.WithoutCancel(ctx), ws.ID, now); err != nil {
		s.log.Warn("checkpoint: record the check", "workspace", ws.ID, "err", err)
	}
}
