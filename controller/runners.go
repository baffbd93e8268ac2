package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// helloTimeout bounds how long a freshly connected runner may take to introduce itself.
const helloTimeout = 10 * time.Second

var runnerUpgrader = websocket.Upgrader{
	ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10, EnableCompression: false,
	// Runners are not browsers and carry a bearer token; Origin means nothing here.
	CheckOrigin: func(*http.Request) bool { return true },
}

// authenticateRunner accepts a one-use bootstrap token or a session token from an earlier
// exchange and returns the allocation. A bootstrap token is only looked at here: it is claimed
// once the runner's hello was accepted, so a connection that fails before that (a bad upgrade, a
// refused hello, a dropped socket) does not strand the allocation without any usable token.
func (s *Server) authenticateRunner(ctx context.Context, token string) (store.Allocation, bool, error) {
	switch {
	case strings.HasPrefix(token, prefixBootstrap):
		a, err := s.store.BootstrapAllocation(ctx, hashToken(token))
		return a, true, err
	case strings.HasPrefix(token, prefixSession):
		a, err := s.store.AllocationBySession(ctx, hashToken(token))
		return a, false, err
	default:
		return store.Allocation{}, false, protocol.Errorf(protocol.CodeUnauthorized, "missing or malformed runner token")
	}
}

func (s *Server) handleRunnerConnect(w http.ResponseWriter, r *http.Request) {
	token := bearer(r)
	alloc, bootstrap, err := s.authenticateRunner(r.Context(), token)
	if err != nil {
		s.log.Warn("runner refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, err)
		return
	}
	ws, err := runnerUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade already answered
	}
	conn := protocol.NewWSConn(ws)
	defer conn.Close()
	sess, err := protocol.MuxServer(conn)
	if err != nil {
		return
	}
	defer sess.Close()
	// The session token is granted in exchange for the bootstrap token, claimed atomically just
	// before the welcome is sent: of two runners presenting the same token, one wins.
	var claim func() (string, error)
	if bootstrap {
		claim = func() (string, error) {
			session := newToken(prefixSession)
			_, err := s.store.ClaimBootstrap(s.ctx, hashToken(token), hashToken(session))
			return session, err
		}
	}
	hello, version, err := s.acceptHello(sess, alloc, claim)
	if err != nil {
		s.log.Warn("runner hello refused", "allocation", alloc.ID, "err", err)
		return
	}
	ctx := s.ctx
	if err := s.store.UpdateAllocation(ctx, alloc.ID, store.AllocConnected, hello.Root, hello.RunnerVersion); err != nil {
		s.log.Error("record runner connection", "allocation", alloc.ID, "err", err)
		return
	}
	s.reconcileRuns(ctx, alloc.ID, hello.Runs)
	s.recordServices(ctx, alloc.WorkspaceID, hello.Services, true)
	c := hub.NewConn(sess, alloc.ID, alloc.WorkspaceID, hello, version)
	s.hub.Add(c)
	go s.serveRunnerOps(c)
	s.log.Info("runner connected", "allocation", alloc.ID, "workspace", alloc.WorkspaceID, "runner", hello.RunnerVersion, "protocol", version)
	select {
	case <-c.Done():
	case <-s.ctx.Done():
	}
	s.hub.Remove(c)
	if _, live := s.hub.Get(alloc.ID); !live {
		// Leave destroyed and failed allocations as they are.
		if a, err := s.store.GetAllocation(context.Background(), alloc.ID); err == nil && a.State == store.AllocConnected {
			_ = s.store.UpdateAllocation(context.Background(), alloc.ID, store.AllocDisconnected, "", "")
		}
	}
	s.log.Info("runner disconnected", "allocation", alloc.ID)
}

// acceptHello reads the runner's hello on its first stream and answers with the welcome.
func (s *Server) acceptHello(sess *yamux.Session, alloc store.Allocation, claim func() (string, error)) (protocol.Hello, int, error) {
	var hello protocol.Hello
	timer := time.AfterFunc(helloTimeout, func() { sess.Close() })
	defer timer.Stop()
	st, err := sess.AcceptStream()
	if err != nil {
		return hello, 0, err
	}
	defer st.Close()
	refuse := func(err *protocol.Error) (protocol.Hello, int, error) {
		_ = protocol.WriteJSON(st, protocol.Trailer{Error: err})
		return hello, 0, err
	}
	var h protocol.Header
	if err := protocol.ReadJSON(st, &h); err != nil {
		return hello, 0, err
	}
	if h.Op != "hello" {
		return refuse(protocol.Errorf(protocol.CodeInvalidArgument, "first operation must be hello, got %q", h.Op))
	}
	if err := protocol.ReadJSON(st, &hello); err != nil {
		return hello, 0, err
	}
	if hello.AllocationID != alloc.ID {
		return refuse(protocol.Errorf(protocol.CodeUnauthorized, "token belongs to another allocation"))
	}
	version, err := protocol.Negotiate(hello.ProtocolMin, hello.ProtocolMax)
	if err != nil {
		return refuse(protocol.AsError(err))
	}
	var session string
	if claim != nil {
		if session, err = claim(); err != nil {
			return refuse(protocol.AsError(err))
		}
	}
	ws, err := s.store.GetWorkspace(s.ctx, alloc.WorkspaceID)
	if err != nil {
		return hello, 0, err
	}
	welcome, err := json.Marshal(protocol.Welcome{Protocol: version, WorkspaceID: alloc.WorkspaceID, SessionToken: session, Epoch: ws.Epoch})
	if err != nil {
		return hello, 0, err
	}
	if err := protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: welcome}); err != nil {
		return hello, 0, err
	}
	return hello, version, nil
}

// serveRunnerOps answers the operations a runner opens: reports of runs that finished detached,
// artifact fetches (which stream a body) and artifact install reports.
func (s *Server) serveRunnerOps(c *hub.Conn) {
	for {
		st, err := c.Accept()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			_ = st.SetDeadline(time.Now().Add(30 * time.Second))
			var h protocol.Header
			if err := protocol.ReadJSON(st, &h); err != nil {
				return
			}
			if h.Op == protocol.OpArtifactFetch {
				s.serveArtifactFetch(c, st, h)
				return
			}
			_ = protocol.WriteJSON(st, s.runnerOp(c, h))
		}()
	}
}

func (s *Server) runnerOp(c *hub.Conn, h protocol.Header) protocol.Trailer {
	if h.Op == protocol.OpArtifactInstalled {
		return s.artifactInstalled(c, h)
	}
	if h.Op != protocol.OpRunExited {
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeUnsupported, "operation %q is not supported by this controller", h.Op)}
	}
	var st protocol.RunStatus
	if err := json.Unmarshal(h.Args, &st); err != nil || !st.Finished {
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeInvalidArgument, "run_exited needs a finished run status")}
	}
	run, err := s.store.GetRun(s.ctx, st.RunID)
	if err != nil || run.AllocationID != c.AllocationID {
		// A runner may only settle its own runs.
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeNotFound, "run %q not found", st.RunID)}
	}
	// A lost run is one the controller could not account for; the runner's own report of its
	// exit is the better record.
	if run.State == api.RunRunning || run.State == api.RunLost {
		if err := s.finishRun(s.ctx, run.ID, st.Exit); err != nil {
			return protocol.Trailer{Error: protocol.AsError(err)}
		}
	}
	return protocol.Trailer{OK: true}
}

// reconcileRuns settles runs the controller still thinks are running, from what the runner
// reports after a reconnect: finished ones get their exit, unknown ones are lost.
func (s *Server) reconcileRuns(ctx context.Context, allocationID string, reported []protocol.RunStatus) {
	running, err := s.store.RunningRuns(ctx, allocationID)
	if err != nil {
		s.log.Error("list running runs", "allocation", allocationID, "err", err)
		return
	}
	byID := make(map[string]protocol.RunStatus, len(reported))
	for _, r := range reported {
		byID[r.RunID] = r
	}
	for _, run := range running {
		st, ok := byID[run.ID]
		switch {
		case !ok:
			err = s.store.FinishRun(ctx, run.ID, api.RunLost, nil, 0, "the runner no longer knows this run", time.Now().UTC())
		case st.Finished:
			err = s.finishRun(ctx, run.ID, st.Exit)
		default:
			continue
		}
		if err != nil {
			s.log.Error("settle run", "run", run.ID, "err", err)
		}
	}
}

// finishRun records how a run ended: exited with a code or a signal, or failed to run at all.
func (s *Server) finishRun(ctx context.Context, runID string, exit protocol.ExecExit) error {
	state, msg := api.RunExited, ""
	var code *int
	if exit.Error != nil {
		msg = exit.Error.Error()
	}
	switch {
	case exit.ExitCode >= 0:
		c := exit.ExitCode
		code = &c
	case exit.Signal == 0:
		state = api.RunFailed
	}
	if err := s.store.FinishRun(ctx, runID, state, code, exit.Signal, msg, time.Now().UTC()); err != nil {
		return fmt.Errorf("finish run %s: %w", runID, err)
	}
	return nil
}
