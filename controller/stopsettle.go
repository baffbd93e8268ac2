package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// staleStop is how long a workspace may stay stopping before the upkeep takes it for a stop
// nobody is finishing (its controller died, or a store error cut it short): far beyond a
// quiesce's grace and a provider's stop timeout (Daytona's default is 300 s).
const staleStop = 15 * time.Minute

// settleStops finishes the stops nobody is finishing, so a stop cut short never leaves its
// workspace stopping for good. Only what is safe whoever else may still be at work is done:
//   - an allocation stopped (the provider stopped and kept the sandbox, its tokens are dead) a
//     minute ago or more — a live stop takes milliseconds from there to finish-stop — only lacks
//     its runs settled, a new epoch and finish-stop: all are done now;
//   - a workspace stopping for staleStop whose stop is not running here, whose sandbox the
//     provider, asked afresh, reports kept (stopped or archived), is stopped with an unknown tree
//     (no digest was recorded, so no saved copy stands in for it).
//
// A stop whose controller died before the provider stopped the sandbox (the sandbox still
// running) is left stopping: the upkeep cannot tell it from a slow stop on another controller
// (a provider's stop may be given any timeout), and refusing a stop that then completes would
// leave a ready workspace with a stopped sandbox. rm ends it.
//
// A sandbox placed on another controller is left to that one (host-local providers), as the
// lost check does.
func (s *Server) settleStops(ctx context.Context) {
	list, err := s.store.ListWorkspaces(ctx, false)
	if err != nil {
		s.log.Warn("settle stops: list workspaces", "err", err)
		return
	}
	for _, ws := range list {
		if ctx.Err() != nil || ws.State != api.StateStopping || s.stops.has(ws.ID) {
			continue
		}
		a, err := s.store.GetAllocation(ctx, ws.AllocationID)
		if err != nil {
			continue
		}
		if a.State == store.AllocStopped {
			if s.now().Sub(a.UpdatedAt) >= time.Minute {
				s.settleRuns(ctx, a.ID, stoppedNote)
				s.finishStop(ctx, ws, "stopped; the stop was finished by the upkeep")
			}
			continue
		}
		if s.now().Sub(ws.UpdatedAt) < staleStop {
			continue
		}
		if local, err := s.hostLocal(ctx, a.Provider); err != nil || (local && a.PlacedOn != s.id) {
			continue
		}
		st, err := s.inspectBounded(ctx, a)
		if err != nil || (st.State != provider.StateStopped && st.State != provider.StateArchived) {
			continue
		}
		if err := s.store.StopAllocation(ctx, a.ID, ""); err != nil {
			s.log.Warn("settle stops: stop allocation", "allocation", a.ID, "err", err)
			continue
		}
		s.disconnect(ctx, a.ID)
		s.settleRuns(ctx, a.ID, stoppedNote)
		s.finishStop(ctx, ws, fmt.Sprintf("stopped; the stop was finished by the upkeep after %s (the sandbox is %s; its tree is not known to equal any receipt)", staleStop, st.State))
	}
}

// finishStop fences every writer of a workspace whose sandbox is stopped and kept (a new epoch)
// and moves it to stopped with cause.
func (s *Server) finishStop(ctx context.Context, ws api.Workspace, cause string) {
	if _, err := s.store.BumpEpoch(ctx, ws.ID); err != nil {
		s.log.Warn("finish stop: new epoch", "workspace", ws.ID, "err", err)
		return
	}
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FinishStop, "", cause); err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
		s.log.Warn("finish stop", "workspace", ws.ID, "err", err)
	}
}
