package controller

import (
	"context"
	"fmt"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// quiesceWhy says why a quiesce stops what it stops, and how that is recorded.
type quiesceWhy struct {
	op string // "close", "stop": said in the error
	// reason is every stopped service's stop reason.
	reason string
	// runNote, when set, is recorded as the error of every run it stopped that has none.
	runNote string
}

var quiesceForClose = quiesceWhy{op: "close", reason: "stopped because the workspace closed"}

// quiesce has the runner stop every run and service of ws, verified, and refuse new ones, so
// that nothing writes to the tree after close's last capture. The runs it stopped are recorded
// with their exits and the services with their final states. An error means something may
// still be running: close must not save around it.
func (s *Server) quiesce(ctx context.Context, ws api.Workspace, c *hub.Conn, why quiesceWhy) (protocol.QuiesceResult, error) {
	var res protocol.QuiesceResult
	if why.runNote != "" {
		if running, err := s.store.RunningRuns(ctx, ws.AllocationID); err == nil {
			for _, run := range running {
				s.stoppingRuns.Store(run.ID, why.runNote)
				defer s.stoppingRuns.Delete(run.ID)
			}
		}
	}
	err := c.Call(ctx, protocol.OpQuiesce, ws.Epoch, protocol.QuiesceArgs{Reason: why.reason}, &res)
	if err != nil {
		// What the runner managed to stop is recorded all the same.
		s.refreshServices(ctx, ws.ID, c)
		return res, fmt.Errorf("%s: could not stop every run and service: %w", why.op, err)
	}
	for _, run := range res.Runs {
		if !run.Finished {
			continue
		}
		exit := run.Exit
		if exit.Error == nil && why.runNote != "" {
			exit.Error = &protocol.Error{Code: protocol.CodeCanceled, Message: why.runNote}
		}
		if err := s.finishRun(context.WithoutCancel(ctx), run.RunID, exit); err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
			s.log.Warn("record a stopped run", "op", why.op, "run", run.RunID, "err", err)
		}
	}
	s.recordServices(ctx, ws.ID, res.Services, false)
	return res, nil
}

// unquiesce opens the runner's gate again after a close that quiesced and then refused: the
// workspace stays ready and takes new runs and services. Best effort: the close already failed.
func (s *Server) unquiesce(ctx context.Context, ws api.Workspace, c *hub.Conn) {
	if err := c.Call(context.WithoutCancel(ctx), protocol.OpQuiesce, ws.Epoch, protocol.QuiesceArgs{Release: true}, nil); err != nil {
		s.log.Warn("reopen the gate after a refused close", "workspace", ws.ID, "err", err)
	}
}

// refreshServices records every service as the runner lists it now (best effort).
func (s *Server) refreshServices(ctx context.Context, workspaceID string, c *hub.Conn) {
	var list []protocol.ServiceStatus
	if err := c.Call(context.WithoutCancel(ctx), protocol.OpServiceList, 0, struct{}{}, &list); err != nil {
		return
	}
	s.recordServices(ctx, workspaceID, list, true)
}

// activeServices counts the services of a connected runner that are not over yet.
func activeServices(ctx context.Context, c *hub.Conn) (int, error) {
	var list []protocol.ServiceStatus
	if err := c.Call(ctx, protocol.OpServiceList, 0, struct{}{}, &list); err != nil {
		return 0, err
	}
	n := 0
	for _, st := range list {
		if st.State != protocol.ServiceStopped && st.State != protocol.ServiceFailed {
			n++
		}
	}
	return n, nil
}
