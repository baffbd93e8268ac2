package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

var workspaceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// idPrefixes start the ids of each kind of record.
var idPrefixes = []string{"ws_", "al_", "run_", "snap_", "art_", "prj_"}

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (s *Server) handleCreateWorkspace(w http.ResponseWriter, r *http.Request) {
	var req api.CreateWorkspaceRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	ws, err := s.CreateWorkspace(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ws)
}

// CreateWorkspace records a workspace, has its provider start an allocation and waits until the
// runner inside says hello (ready) or the ready timeout passes (failed, with the reason). The
// provisioning goes on if ctx ends first, so a client that gives up leaves a settled record. A
// request naming a parent (FromWorkspace) makes a child of it (createChild).
func (s *Server) CreateWorkspace(ctx context.Context, req api.CreateWorkspaceRequest) (api.Workspace, error) {
	if req.FromWorkspace != "" || req.FromSnapshot != "" || req.WaitForSave || req.WaitTimeout != nil {
		return s.createChild(ctx, req)
	}
	return s.createWorkspace(ctx, req, nil)
}

// createWorkspace is CreateWorkspace; onID, when set, is called with the new workspace's id
// before it is recorded (a restore marks it busy there, so no checkpoint sees its empty tree).
func (s *Server) createWorkspace(ctx context.Context, req api.CreateWorkspaceRequest, onID func(id string)) (api.Workspace, error) {
	if req.Provider == "" {
		req.Provider = s.cfg.DefaultProvider
	}
	id := newID("ws_")
	if req.CheckpointEvery != nil {
		if err := CheckEvery(time.Duration(*req.CheckpointEvery)); err != nil {
			return api.Workspace{}, err
		}
	}
	idle, err := idleChoice(req.IdleStop, req.IdleClose, false, false)
	if err != nil {
		return api.Workspace{}, err
	}
	if onID != nil {
		onID(id)
	}
	if req.Name == "" {
		req.Name = id
	}
	if err := checkName("workspace", req.Name, id); err != nil {
		return api.Workspace{}, err
	}
	var proj api.Project
	var git *api.WorkspaceGit
	if req.Project != "" {
		plan, err := s.planCheckout(ctx, req)
		if err != nil {
			return api.Workspace{}, err
		}
		if plan.Reuse != nil {
			return *plan.Reuse, nil
		}
		// A shared branch's workspace is recorded under its branch's lock, so two requests
		// never both create one.
		defer plan.Release()
		proj, git = plan.Project, plan.Git
	} else if req.Mode != "" || req.Branch != "" || len(req.Provision) > 0 || len(req.Teardown) > 0 {
		return api.Workspace{}, protocol.Errorf(protocol.CodeInvalidArgument, "--mode, --branch, --provision and --teardown need --project")
	}
	prov, err := s.providerFor(ctx, req.Provider)
	if err != nil {
		return api.Workspace{}, err
	}
	now := s.now()
	ws := api.Workspace{ID: id, Name: req.Name, Provider: req.Provider, State: api.StateProvisioning,
		AllocationID: newID("al_"), Git: git, CreatedAt: now, UpdatedAt: now, CheckpointEvery: req.CheckpointEvery, IdlePolicy: idle}

	token := newToken(prefixBootstrap)
	alloc := store.Allocation{ID: ws.AllocationID, WorkspaceID: ws.ID, Provider: ws.Provider,
		State: store.AllocStarting, BootstrapHash: hashToken(token), CreatedAt: now, UpdatedAt: now,
		PlacedOn: s.id, ReadyBy: s.readyBy(now)}
	if err := s.store.CreateWorkspace(ctx, ws, alloc); err != nil {
		return api.Workspace{}, err
	}
	// Provisioning outlives the request that started it; it ends with the controller.
	done := make(chan struct{})
	started := s.routines.Go("provision "+ws.ID, func(ctx context.Context) {
		defer close(done)
		s.provision(ctx, prov, ws, proj, token, req.Options)
	})
	if !started {
		err := protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down")
		_ = s.store.TransitionWorkspace(context.WithoutCancel(ctx), ws.ID, wsstate.FailProvision, err.Message, "provisioning failed")
		return api.Workspace{}, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return api.Workspace{}, ctx.Err()
	}
	return s.workspace(context.WithoutCancel(ctx), ws.ID)
}

// provision has the provider start ws's allocation and, for a project's workspace, checks out
// and provisions it, then marks the workspace ready (or failed). ctx is the controller's.
func (s *Server) provision(ctx context.Context, prov provider.Provider, ws api.Workspace, proj api.Project, token string, options map[string]string) {
	if err := s.startAllocationWith(ctx, prov, ws, token, options); err != nil {
		s.log.Warn("workspace failed", "workspace", ws.ID, "reason", err)
		_ = s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FailProvision, protocol.AsError(err).Message, "provisioning failed")
		return
	}
	if ws.Git != nil {
		if err := s.prepareCheckout(ctx, ws, proj); err != nil {
			s.log.Warn("workspace checkout or provision failed", "workspace", ws.ID, "reason", err)
			_ = s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FailProvision, protocol.AsError(err).Message, "checkout or provision failed")
			if rerr := s.releaseAllocation(context.WithoutCancel(ctx), ws); rerr != nil {
				s.log.Warn("release failed workspace", "workspace", ws.ID, "err", rerr)
			}
			return
		}
	}
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FinishProvision, "", "runner connected and answered a probe"); err != nil {
		s.log.Error("mark workspace ready", "workspace", ws.ID, "err", err)
	}
}

// checkName refuses names a record of kind may not take: outside the name pattern, or starting
// like an id (ids carry a kind prefix, so an id of one kind is never taken for a name or an id
// of another).
func checkName(kind, name, id string) error {
	if !workspaceName.MatchString(name) {
		return protocol.Errorf(protocol.CodeInvalidArgument,
			"invalid %s name %q: use letters, digits, '.', '_' and '-', at most 63", kind, name)
	}
	for _, p := range idPrefixes {
		if name != id && strings.HasPrefix(name, p) {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%s name %q starts with %q, which is reserved for ids", kind, name, p)
		}
	}
	return nil
}

// startAllocation has the provider start ws's current allocation and waits until its runner
// said hello and answered a probe: a created record is not readiness. On failure the allocation
// is revoked (a late runner is refused) and whatever the provider started is stopped.
func (s *Server) startAllocation(ctx context.Context, prov provider.Provider, ws api.Workspace, token string) error {
	return s.startAllocationWith(ctx, prov, ws, token, nil)
}

// startAllocationWith is startAllocation with provider options for the new sandbox.
func (s *Server) startAllocationWith(ctx context.Context, prov provider.Provider, ws api.Workspace, token string, opts map[string]string) error {
	// The ready deadline is this routine's to enforce while it runs (the cluster's once it is
	// gone: failOverdue).
	defer s.provisioning.begin(ws.AllocationID)()
	fail := func(reason string) error {
		_ = s.store.UpdateAllocation(ctx, ws.AllocationID, store.AllocFailed, "", "")
		// A failed Create leaves nothing behind (not_found); anything it did start is stopped.
		if err := prov.Stop(context.WithoutCancel(ctx), ws.AllocationID); err != nil && provider.ErrorCode(err) != provider.CodeNotFound {
			s.log.Warn("stop failed allocation", "allocation", ws.AllocationID, "err", err)
		}
		return protocol.Errorf(protocol.CodeProviderFailed, "%s", reason)
	}
	alloc, err := prov.Create(ctx, provider.CreateRequest{
		WorkspaceID: ws.ID, AllocationID: ws.AllocationID, ControllerURL: s.advertise,
		RunnerToken: token, RunnerBinary: s.cfg.RunnerBinary, Options: opts,
		ControllerSocket: s.runnerSocket,
	})
	if err != nil {
		return fail(fmt.Sprintf("provider %s could not create the sandbox: %v", ws.Provider, err))
	}
	// What the provider says of the sandbox (its network, limits, isolation) is kept with the
	// allocation and shown by workspace show.
	if err := s.store.SetAllocationInfo(ctx, ws.AllocationID, alloc.Info); err != nil {
		s.log.Warn("record allocation info", "allocation", ws.AllocationID, "err", err)
	}
	if alloc.Root != "" {
		// The runner may already have connected, here or to a peer: its claim stands.
		_ = s.store.SetStartingRoot(ctx, ws.AllocationID, alloc.Root)
	}
	if why := s.awaitRunner(ctx, ws.AllocationID); why != "" {
		return fail(why)
	}
	return nil
}

// awaitRunner waits, up to the ready timeout, until the allocation's runner said hello and
// answered a probe (its root is a directory): a started sandbox is not readiness. It returns
// why not, or "".
func (s *Server) awaitRunner(ctx context.Context, allocationID string) string {
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	c, err := s.waitRunner(waitCtx, allocationID)
	if err != nil {
		return fmt.Sprintf("runner did not connect within %s", s.cfg.ReadyTimeout)
	}
	var root protocol.FileInfo
	if err := c.Call(waitCtx, protocol.OpFsStat, 0, protocol.FsPathArgs{Path: "."}, &root); err != nil || root.Type != protocol.FileDir {
		return fmt.Sprintf("runner connected but failed its probe: %v", err)
	}
	return ""
}

// expectKind refuses an id of another kind where one kind (or a name) is expected: an allocation
// id is never taken for a workspace, a workspace id never for a snapshot.
func expectKind(value, want string) error {
	for _, p := range idPrefixes {
		if p != want && strings.HasPrefix(value, p) {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%q is a %s id; expected a %s", value, kindOf[p], kindOf[want])
		}
	}
	return nil
}

var kindOf = map[string]string{"ws_": "workspace", "al_": "allocation", "run_": "run", "snap_": "snapshot", "art_": "artifact", "prj_": "project"}

// workspace loads a workspace (by id or name) with its live connection state. It is the one
// lookup of a workspace for a caller: one outside a limited token's workspaces is not_found, as
// if it did not exist (see principal).
func (s *Server) workspace(ctx context.Context, idOrName string) (api.Workspace, error) {
	ws, err := s.workspaceRecord(ctx, idOrName)
	if err != nil {
		return ws, err
	}
	ws.Connected = s.connected(ctx, ws.AllocationID)
	ws = s.withUsage(s.withIdle(s.withCheckpoint(ws)))
	if info, err := s.store.AllocationInfo(ctx, ws.AllocationID); err != nil {
		s.log.Warn("read allocation info", "allocation", ws.AllocationID, "err", err)
	} else if len(info) > 0 {
		ws.AllocationInfo = info
	}
	return ws, nil
}

func (s *Server) handleListWorkspaces(w http.ResponseWriter, r *http.Request) {
	all, err := s.store.ListWorkspaces(r.Context(), r.URL.Query().Get("all") == "true")
	if err != nil {
		writeError(w, err)
		return
	}
	p := principalOf(r.Context())
	list := make([]api.Workspace, 0, len(all))
	for _, ws := range all {
		if p.sees(ws.ID) {
			ws.Connected = s.connected(r.Context(), ws.AllocationID)
			list = append(list, s.withUsage(s.withIdle(s.withCheckpoint(ws))))
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleGetWorkspace(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (s *Server) handleDeleteWorkspace(w http.ResponseWriter, r *http.Request) {
	purge, err := purgeParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if purge {
		res, err := s.purgeWorkspace(r.Context(), r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	ws, err := s.deleteWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// DeleteWorkspace revokes the runner's session, destroys the sandbox and marks the workspace
// deleted.
func (s *Server) DeleteWorkspace(ctx context.Context, idOrName string) error {
	_, err := s.deleteWorkspace(ctx, idOrName)
	return err
}

func (s *Server) deleteWorkspace(ctx context.Context, idOrName string) (api.Workspace, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err == nil && ws.State == api.StateDeleted {
		err = protocol.Errorf(protocol.CodeNotFound, "workspace %q was deleted", idOrName)
	}
	if err != nil {
		return ws, err
	}
	if ws.State == api.StateReady {
		s.teardown(ctx, ws)
	}
	// The runner's session is revoked before the sandbox goes, so it cannot reconnect between.
	if err := s.releaseAllocation(ctx, ws); err != nil {
		return ws, err
	}
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.Delete, "", "workspace rm"); err != nil {
		// A concurrent rm got there first: the workspace is what this one asked for, as it was
		// before deleting became a checked transition.
		if cur, gerr := s.store.GetWorkspace(ctx, ws.ID); protocol.CodeOf(err) != protocol.CodeConflict || gerr != nil || cur.State != api.StateDeleted {
			return ws, err
		}
	}
	ws.State, ws.Connected = api.StateDeleted, false
	return ws, nil
}

// workspaceRecord is the workspace as stored, if the caller may see it: one query, for paths
// where every request counts (the proxy), without what workspace adds for display.
func (s *Server) workspaceRecord(ctx context.Context, idOrName string) (api.Workspace, error) {
	if err := expectKind(idOrName, "ws_"); err != nil {
		return api.Workspace{}, err
	}
	ws, err := s.store.GetWorkspace(ctx, idOrName)
	if err != nil {
		return ws, err
	}
	if !principalOf(ctx).sees(ws.ID) {
		return api.Workspace{}, notFound("workspace", idOrName)
	}
	return ws, nil
}

// liveConn finds the connected runner of a ready workspace.
func (s *Server) liveConn(ctx context.Context, idOrName string) (api.Workspace, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return ws, err
	}
	if ws.State != api.StateReady {
		return ws, notReady(ws)
	}
	if !ws.Connected {
		return ws, protocol.Errorf(protocol.CodeUnavailable, "the runner of workspace %s is not connected", ws.ID)
	}
	return ws, nil
}

// notReady refuses work that needs a ready workspace, with the next step where there is one:
// the message is what the CLI prints.
func notReady(ws api.Workspace) error {
	next := ""
	switch ws.State {
	case api.StateClosed:
		next = fmt.Sprintf("; reopen it with \"tether workspace reopen %s\"", ws.ID)
	case api.StateLost:
		next = fmt.Sprintf("; its sandbox was destroyed outside Tether: see what was lost with \"tether workspace events %s\", rebuild it from its last receipt with \"tether workspace recover %s\"", ws.ID, ws.ID)
	case api.StateStopped:
		next = fmt.Sprintf("; start it with \"tether workspace start %s\"", ws.ID)
	case api.StateProvisioning, api.StateReopening, api.StateClosing, api.StateReclaiming, api.StateRecovering, api.StateStopping, api.StateStarting:
		next = fmt.Sprintf("; wait until it is done (\"tether workspace show %s\")", ws.ID)
	case api.StateFailed:
		next = fmt.Sprintf("; see why with \"tether workspace events %s\"", ws.ID)
	}
	return protocol.Errorf(protocol.CodeConflict, "workspace %s is %s%s", ws.ID, ws.State, next)
}

// runnerFor finds the connected runner of a ready workspace.
func (s *Server) runnerFor(ctx context.Context, idOrName string) (*hub.Conn, error) {
	ws, err := s.liveConn(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	return s.reach(ctx, ws.AllocationID)
}

// handleTreeImport streams a tar body (optionally zstd) into the workspace through the runner,
// which publishes it only once the whole stream arrived and verified.
func (s *Server) handleTreeImport(w http.ResponseWriter, r *http.Request) {
	_, c, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var res protocol.TreeImportResult
	if err := c.CallWithBody(r.Context(), protocol.OpTreeImport, epoch, protocol.TreeImportArgs{Dir: r.URL.Query().Get("dir")}, r.Body, &res); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleListRuns(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	runs, err := s.store.ListRuns(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, runs)
}
