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

// settleStops finishes the stops nobody is finishing, so no workspace stays stopping for good:
//   - an allocation already stopped (the provider stopped and kept the sandbox, the tokens are
//     dead) only lacks the new epoch and finish-stop: both are done now;
//   - past staleStop, the provider is asked afresh: a sandbox it keeps (stopped or archived) is
//     stopped here with an unknown tree (no digest was recorded, so no saved copy stands in for
//     it); anything else is refuse-stop, back to ready with the reason, the runner's gate
//     reopened where its runner is connected here.
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
		if ctx.Err() != nil || ws.State != api.StateStopping {
			continue
		}
		a, err := s.store.GetAllocation(ctx, ws.AllocationID)
		if err != nil {
			continue
		}
		if a.State == store.AllocStopped && s.now().Sub(ws.UpdatedAt) >= time.Minute {
			// A minute: a stop running now finishes within milliseconds of stopping the
			// allocation; this one is nobody's.
			s.finishStop(ctx, ws, "stopped; the stop was finished by the upkeep")
			continue
		}
		if a.State == store.AllocStopped || s.now().Sub(ws.UpdatedAt) < staleStop {
			continue
		}
		if local, err := s.hostLocal(ctx, a.Provider); err != nil || (local && a.PlacedOn != s.id) {
			continue
		}
		st, err := s.inspectBounded(ctx, a)
		if err != nil {
			continue
		}
		if st.State == provider.StateStopped || st.State == provider.StateArchived {
			if err := s.store.StopAllocation(ctx, a.ID, ""); err != nil {
				s.log.Warn("settle stops: stop allocation", "allocation", a.ID, "err", err)
				continue
			}
			s.disconnect(ctx, a.ID)
			s.settleRuns(ctx, a.ID, stoppedNote)
			s.finishStop(ctx, ws, fmt.Sprintf("stopped; the stop was finished by the upkeep after %s (the sandbox is %s; its tree is not known to equal any receipt)", staleStop, st.State))
			continue
		}
		if c, ok := s.runnerOf(ctx, ws.AllocationID); ok {
			s.unquiesce(ctx, ws, c)
		}
		reason := fmt.Sprintf("the stop did not finish within %s and the provider reports the sandbox %s", staleStop, st.State)
		if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.RefuseStop, reason, "stop refused by the upkeep"); err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
			s.log.Warn("settle stops: refuse stop", "workspace", ws.ID, "err", err)
		}
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
