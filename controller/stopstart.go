package controller

// Stop and start: a workspace whose sandbox the provider stops and keeps, files and allocation
// included, and later starts again with a fresh runner. Unlike close nothing is captured and
// nothing released: the unsaved work stays in the sandbox.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// Why a stop ended the runs it stopped, as their records and the services' stop reasons say.
const (
	stoppedNote   = "workspace stopped"
	stoppedReason = "stopped because the workspace stopped"
)

// providerStartTimeout bounds a provider's Start of a kept sandbox: an archived one may take
// minutes to restore (Daytona's restoring) before its runner can start at all.
const providerStartTimeout = 10 * time.Minute

func (s *Server) handleStop(w http.ResponseWriter, r *http.Request) {
	ws, err := s.StopWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	ws, err := s.StartWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// canStopAndKeep refuses a provider that cannot stop a sandbox and start it again.
func (s *Server) canStopAndKeep(ctx context.Context, ws api.Workspace) error {
	prov, err := s.providerFor(ctx, ws.Provider)
	if err != nil {
		return err
	}
	info, err := prov.Info(ctx)
	if err != nil {
		return protocol.Errorf(protocol.CodeProviderFailed, "provider %s: %v", ws.Provider, err)
	}
	if !slices.Contains(info.Capabilities, provider.CapStop) || !slices.Contains(info.Capabilities, provider.CapStart) {
		return protocol.Errorf(protocol.CodeUnsupported, "provider %s cannot stop a sandbox and keep it; close the workspace instead (\"tether workspace close %s\")", ws.Provider, ws.ID)
	}
	return nil
}

// beginStopStart is how a stop or a start begins: a workspace already in the state it leads to
// is answered as it is (done); one not in from is refused with its state; and everything else
// that can refuse without changing anything does so (a host-local sandbox whose controller is
// gone, a provider that cannot stop and start) before ev moves the workspace.
func (s *Server) beginStopStart(ctx context.Context, idOrName string, from, to api.WorkspaceState, ev wsstate.Event) (api.Workspace, store.Allocation, bool, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return ws, store.Allocation{}, false, err
	}
	switch ws.State {
	case to:
		return ws, store.Allocation{}, true, nil
	case from:
	default:
		return ws, store.Allocation{}, false, notReady(ws)
	}
	a, err := s.store.GetAllocation(ctx, ws.AllocationID)
	if err == nil {
		_, _, err = s.placedElsewhere(ctx, a)
	}
	if err == nil {
		err = s.canStopAndKeep(ctx, ws)
	}
	if err == nil {
		err = s.store.TransitionWorkspace(ctx, ws.ID, ev, "", string(ev))
	}
	return ws, a, false, err
}

// StopWorkspace stops a ready workspace's sandbox and keeps it: its runs and services are
// stopped first (SIGTERM, SIGKILL after the grace), then the provider stops the sandbox, and a
// fresh Inspect must find it stopped or archived. The workspace becomes stopped, its unsaved
// work still in the sandbox: nothing is captured, the allocation is not released, every writer
// is fenced (a new epoch). A sandbox the provider did not stop or keep leaves the workspace
// ready, with the reason (refuse-stop). A stopped workspace is answered as it is.
func (s *Server) StopWorkspace(ctx context.Context, idOrName string) (api.Workspace, error) {
	ws, a, done, err := s.beginStopStart(ctx, idOrName, api.StateReady, api.StateStopped, wsstate.StartStop)
	if done || err != nil {
		return ws, err
	}
	// A stop that began finishes, whoever gave up waiting for it: a client that went away must
	// not leave the workspace stopping.
	bg := context.WithoutCancel(ctx)
	defer s.stops.begin(ws.ID)()
	tree := s.quiesceForStop(bg, ws)
	if err := s.onSandbox(bg, a, sandboxStopKeep); err != nil {
		if c, ok := s.runnerOf(bg, ws.AllocationID); ok {
			s.unquiesce(bg, ws, c)
		}
		_ = s.store.TransitionWorkspace(bg, ws.ID, wsstate.RefuseStop, protocol.AsError(err).Message, "stop refused")
		return ws, err
	}
	// Kept: the runner is gone with the sandbox's processes, and no token of it works any more.
	if err := s.store.StopAllocation(bg, a.ID, tree); err != nil {
		return ws, err
	}
	s.disconnect(bg, a.ID)
	s.settleRuns(bg, a.ID, stoppedNote)
	if _, err := s.store.BumpEpoch(bg, ws.ID); err != nil {
		return ws, err
	}
	cause := "stopped; the sandbox and its unsaved work are kept"
	if last, err := s.lastReceipt(bg, ws.ID); err == nil && last != nil && tree != "" && last.Summary.Tree == tree {
		cause = "stopped; the sandbox is kept, its files are those of " + last.ID
	}
	if err := s.store.TransitionWorkspace(bg, ws.ID, wsstate.FinishStop, "", cause); err != nil {
		// Finished already (another controller's upkeep took this stop for one cut short): the
		// workspace is stopped, which is what was asked.
		if cur, gerr := s.workspace(bg, ws.ID); protocol.CodeOf(err) == protocol.CodeConflict && gerr == nil && cur.State == api.StateStopped {
			return cur, nil
		}
		return ws, err
	}
	return s.workspace(bg, ws.ID)
}

// quiesceForStop stops the workspace's runs and services through its runner, each recorded as
// ended by the stop, and returns the tree digest of what is left (the tree at rest), or "" when
// it could not be read. A runner that cannot be reached or cannot stop everything is recorded
// and the stop goes on: the provider's stop ends every process of the sandbox anyway (SIGTERM,
// then SIGKILL), and nothing is saved that a process still running could tear.
func (s *Server) quiesceForStop(ctx context.Context, ws api.Workspace) string {
	c, err := s.reach(ctx, ws.AllocationID)
	if err != nil {
		_ = s.store.RecordEvent(ctx, ws.ID, "stop: the runner is not connected; the provider stops what runs in the sandbox")
		return ""
	}
	if _, err := s.quiesce(ctx, ws, c, quiesceWhy{op: "stop", reason: stoppedReason, runNote: stoppedNote}); err != nil {
		_ = s.store.RecordEvent(ctx, ws.ID, protocol.AsError(err).Message+"; the provider stops what is left")
		return ""
	}
	// A file write, upload or import that began before the stop (while the workspace was ready)
	// may still be landing: the set that matters is what is open now, before the digest (one that
	// lands during the walk and ends before a later look would go unseen), and again after it.
	if s.fileOpOpen(ctx, ws) {
		return ""
	}
	var digest protocol.SnapshotSummary
	args := protocol.SnapshotCaptureArgs{WorkspaceID: ws.ID}
	if last, err := s.lastReceipt(ctx, ws.ID); err == nil && last != nil {
		args.Parent, args.Incremental = last.ID, true
	}
	if err := c.Call(ctx, protocol.OpTreeDigest, 0, args, &digest); err != nil {
		s.log.Info("stop: tree digest", "workspace", ws.ID, "err", err)
		return ""
	}
	if s.fileOpOpen(ctx, ws) {
		return ""
	}
	return digest.Tree
}

// fileOpOpen reports (and records) whether a request of ws is open on this controller: a file
// write, upload or import open then may change the tree around a stop's digest, so the tree the
// sandbox keeps is unknown and no saved copy may stand in for it. Such a request is counted open
// from before its own state check until it ends, so none that passed that check while the
// workspace was ready is missed.
func (s *Server) fileOpOpen(ctx context.Context, ws api.Workspace) bool {
	if _, open := s.activity.latest(ws.ID, s.now()); !open {
		return false
	}
	_ = s.store.RecordEvent(ctx, ws.ID, "stop: a file operation was still in progress; the kept tree is not known to equal any receipt")
	return true
}

// settleRuns records the runs of an allocation still running as lost with why: its sandbox's
// processes ended without their runner reporting them.
func (s *Server) settleRuns(ctx context.Context, allocationID, why string) {
	running, err := s.store.RunningRuns(ctx, allocationID)
	if err != nil {
		s.log.Warn("list running runs", "allocation", allocationID, "err", err)
		return
	}
	for _, run := range running {
		if err := s.store.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunLost, Error: why, At: s.now()}); err != nil {
			s.log.Warn("settle run", "run", run.ID, "err", err)
		}
	}
}

// StartWorkspace starts a stopped workspace's kept sandbox: the provider starts it (an archived
// one is restored first) with a fresh bootstrap token, and once the runner connected and
// answered a probe the workspace is ready under a new writer epoch: leases and writers from
// before the stop stay fenced. If the provider fails or the runner does not connect within the
// ready timeout, the sandbox is stopped again and the workspace is stopped, with the reason
// (fail-start). A ready workspace is answered as it is.
func (s *Server) StartWorkspace(ctx context.Context, idOrName string) (api.Workspace, error) {
	ws, a, done, err := s.beginStopStart(ctx, idOrName, api.StateStopped, api.StateReady, wsstate.StartStart)
	if done || err != nil {
		return ws, err
	}
	bg := context.WithoutCancel(ctx)
	// The ready deadline is this routine's to enforce while it runs, the upkeep's if this
	// controller goes (failOverdue); it allows for the provider's start too.
	defer s.provisioning.begin(a.ID)()
	token := newToken(prefixBootstrap)
	readyBy := s.now().Add(providerStartTimeout + s.cfg.ReadyTimeout)
	if err := s.store.RestartAllocation(bg, a.ID, hashToken(token), readyBy); err != nil {
		_ = s.store.TransitionWorkspace(bg, ws.ID, wsstate.FailStart, protocol.AsError(err).Message, "start failed")
		return ws, err
	}
	fail := func(err error) (api.Workspace, error) {
		s.failStart(bg, ws.ID, a, protocol.AsError(err).Message)
		return ws, err
	}
	startCtx, cancel := context.WithTimeout(bg, providerStartTimeout)
	err = s.startSandbox(startCtx, a, token)
	cancel()
	if err != nil {
		return fail(err)
	}
	if why := s.awaitRunner(bg, a.ID); why != "" {
		return fail(protocol.Errorf(protocol.CodeProviderFailed, "%s", why))
	}
	epoch, err := s.store.BumpEpoch(bg, ws.ID)
	if err != nil {
		return fail(err)
	}
	if err := s.store.TransitionWorkspace(bg, ws.ID, wsstate.FinishStart, "", fmt.Sprintf("started: the runner connected and answered a probe (epoch %d)", epoch)); err != nil {
		return fail(err)
	}
	s.pushEpoch(bg, ws, epoch)
	return s.workspace(bg, ws.ID)
}

// failStart puts a workspace whose start failed back to stopped: its allocation admits no
// runner again (a late one is refused), the sandbox is stopped where it can be reached, and the
// workspace records why. The digest its stop recorded stays.
func (s *Server) failStart(ctx context.Context, wsID string, a store.Allocation, reason string) {
	if err := s.store.StopAllocation(ctx, a.ID, a.StoppedTree); err != nil {
		s.log.Warn("stop the allocation of a failed start", "allocation", a.ID, "err", err)
	}
	s.disconnect(ctx, a.ID)
	if err := s.stopSandbox(ctx, a); err != nil {
		_ = s.store.RecordEvent(ctx, wsID, "the sandbox of allocation "+a.ID+" was not stopped after its start failed: "+protocol.AsError(err).Message)
	}
	if err := s.store.TransitionWorkspace(ctx, wsID, wsstate.FailStart, reason, "start failed"); err != nil {
		s.log.Warn("fail start", "workspace", wsID, "err", err)
	}
}

// stopKeepHere stops a sandbox placed here and confirms with a fresh Inspect that the provider
// keeps it: stopped, or archived (a provider may archive a stopped sandbox at once). Anything
// else is provider_failed, naming what the provider reported.
func (s *Server) stopKeepHere(ctx context.Context, prov provider.Provider, a store.Allocation) error {
	if err := prov.Stop(ctx, a.ID); err != nil {
		return protocol.Errorf(protocol.CodeProviderFailed, "stop allocation %s: %v", a.ID, err)
	}
	st, err := prov.Inspect(ctx, a.ID)
	if err != nil {
		return protocol.Errorf(protocol.CodeProviderFailed, "inspect allocation %s after its stop: %v", a.ID, err)
	}
	if st.State != provider.StateStopped && st.State != provider.StateArchived {
		return protocol.Errorf(protocol.CodeProviderFailed, "provider %s stopped allocation %s but reports it %s (%s), not kept", a.Provider, a.ID, st.State, st.Reason)
	}
	return nil
}

// startRequest is what a peer sends to start a sandbox placed on the controller it asks.
type startRequest struct {
	RunnerToken string `json:"runner_token"`
}

// startSandbox has the provider start an allocation's kept sandbox where it can be reached.
func (s *Server) startSandbox(ctx context.Context, a store.Allocation, token string) error {
	m, elsewhere, err := s.placedElsewhere(ctx, a)
	if err != nil {
		return err
	}
	if elsewhere {
		return s.peerCallJSON(ctx, m, http.MethodPost, sandboxPath(a.ID, sandboxStart), startRequest{RunnerToken: token})
	}
	return s.startHere(ctx, a, token)
}

func (s *Server) startHere(ctx context.Context, a store.Allocation, token string) error {
	prov, err := s.providerFor(ctx, a.Provider)
	if err != nil {
		return err
	}
	if err := prov.Start(ctx, provider.StartRequest{AllocationID: a.ID, RunnerToken: token, ControllerURL: s.advertise}); err != nil {
		return protocol.Errorf(protocol.CodeProviderFailed, "start allocation %s: %v", a.ID, err)
	}
	return nil
}

// handleSandboxStart serves a peer's start of a sandbox placed here.
func (s *Server) handleSandboxStart(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	err := decodeJSON(r, &req)
	var a store.Allocation
	if err == nil {
		a, err = s.store.GetAllocation(r.Context(), r.PathValue("id"))
	}
	if err == nil && a.PlacedOn != s.id {
		err = protocol.Errorf(protocol.CodeInvalidArgument, "allocation %s was not placed on controller %s", a.ID, s.id)
	}
	if err == nil {
		err = s.startHere(r.Context(), a, req.RunnerToken)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
