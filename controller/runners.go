package controller

import (
	"context"
	"encoding/json"
	"errors"
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

// probeTimeout bounds the ping that tells a live runner connection from a dead one when a
// connection for the same allocation arrives.
const probeTimeout = 3 * time.Second

// authenticateRunner finds the allocation of a runner's token: a bootstrap token no session
// replaced yet, or the allocation's confirmed or pending session token. Nothing is spent here:
// the token is rotated only once the runner's hello was accepted (acceptHello), so a connection
// that fails before that (a bad upgrade, a refused hello, a dropped socket) does not strand the
// allocation without any usable token.
func (s *Server) authenticateRunner(ctx context.Context, token string) (store.Allocation, error) {
	switch {
	case strings.HasPrefix(token, prefixBootstrap):
		return s.store.BootstrapAllocation(ctx, hashToken(token))
	case strings.HasPrefix(token, prefixSession):
		return s.store.AllocationBySession(ctx, hashToken(token))
	default:
		return store.Allocation{}, protocol.Errorf(protocol.CodeUnauthorized, "missing or malformed runner token")
	}
}

// Session tokens and replay. Every accepted hello rotates the runner's token: the welcome carries
// a new one, and the store keeps only hashes. At most two tokens admit an allocation's runner:
//
//   - the confirmed one, which the runner is known to hold (the bootstrap token, until a session
//     was confirmed), and
//   - the pending one, which the last welcome carried.
//
// The runner answers the welcome with a WelcomeAck once it took the new token; that confirms it,
// and the token it connected with stops working there and then. If the welcome (or the ack) was
// lost — the socket dropped, the controller crashed after recording the new token — the runner
// reconnects with whichever token it holds: the old one (the new one never arrived: it is
// dropped and another issued) or the new one (presenting it proves it arrived: it is confirmed
// and the old one dies). So a runner is never locked out by a lost welcome, and an old token
// stolen earlier is dead as soon as the runner confirmed a newer one: the only window in which
// an old token still works is the one in which the runner itself may still hold nothing newer.
//
// A second connection while the allocation's runner is connected is refused, never swapped in:
// the hub pings the live session first (probeTimeout), and only a session that does not answer
// — half-open after a network drop the controller has not noticed yet — is closed to admit the
// reconnecting runner. The refusal is code unauthorized with HTTP status StatusAllocationBusy,
// which the runner retries (it may be the genuine runner, early), unlike 401/403; it is logged and
// recorded as a workspace event.
func (s *Server) handleRunnerConnect(w http.ResponseWriter, r *http.Request) {
	token := bearer(r)
	alloc, err := s.authenticateRunner(r.Context(), token)
	if err != nil {
		s.log.Warn("runner refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, err)
		return
	}
	if !s.members.Owning() {
		// Its heartbeat lapsed: peers may be taking its runners over. The runner retries, through
		// the balancer, on another.
		writeError(w, protocol.Errorf(protocol.CodeUnavailable, "controller %s is not acting as an owner: its heartbeat could not be written", s.id))
		return
	}
	if alloc.Owner != "" && alloc.Owner != s.id {
		if err := s.takeOver(r.Context(), alloc); err != nil {
			s.refuseSecondRunner(w, r, alloc, err)
			return
		}
	}
	release, err := s.hub.Admit(alloc.ID, probeTimeout)
	if err != nil {
		s.refuseSecondRunner(w, r, alloc, err)
		return
	}
	defer release()
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
	hello, version, err := s.acceptHello(sess, alloc, hashToken(token))
	if err != nil {
		s.log.Warn("runner hello refused", "allocation", alloc.ID, "err", err)
		// Released before the connection closes: a runner that sees the close and dials again
		// must not find the allocation still reserved for the connection it was refused on.
		release()
		return
	}
	ctx := s.ctx
	c := hub.NewConn(sess, alloc.ID, alloc.WorkspaceID, hello, version)
	if err := s.ownAllocation(ctx, c); err != nil {
		s.log.Error("record runner connection", "allocation", alloc.ID, "err", err)
		return
	}
	s.reconcileRuns(ctx, alloc.ID, hello.Runs)
	s.recordServices(ctx, alloc.WorkspaceID, hello.Services, true)
	s.hub.Add(c)
	if !s.routines.Go("runner ops "+alloc.ID, func(context.Context) { s.serveRunnerOps(c) }) {
		// The controller is shutting down: the connection is not served, and closes below.
		c.Close()
	}
	s.log.Info("runner connected", "allocation", alloc.ID, "workspace", alloc.WorkspaceID, "runner", hello.RunnerVersion, "protocol", version)
	select {
	case <-c.Done():
	case <-s.ctx.Done():
	}
	s.hub.Remove(c)
	if _, ok := s.hub.Get(alloc.ID); !ok {
		s.metrics.DropUsage(alloc.ID)
	}
	s.disownAllocation(alloc.ID)
	s.log.Info("runner disconnected", "allocation", alloc.ID)
}

// refuseSecondRunner answers a connection for an allocation that already has one (Admit's err),
// and logs and records the attempt: with a valid token, it is either the genuine runner early
// (it retries) or someone who got hold of the runner's token.
func (s *Server) refuseSecondRunner(w http.ResponseWriter, r *http.Request, alloc store.Allocation, err error) {
	why := "its runner is connected and answering"
	switch {
	case errors.Is(err, hub.ErrAdmitting):
		why = "another connection of it is being set up"
	case errors.Is(err, errOwnerLive):
		why = "its runner is connected to controller " + alloc.Owner + " and answering there"
	case !errors.Is(err, hub.ErrLive):
		why = err.Error()
	}
	s.log.Warn("second runner connection refused", "allocation", alloc.ID, "workspace", alloc.WorkspaceID, "remote", r.RemoteAddr, "reason", why)
	cause := fmt.Sprintf("runner connection from %s refused: allocation %s already has one (%s)", r.RemoteAddr, alloc.ID, why)
	if err := s.store.RecordEvent(context.WithoutCancel(r.Context()), alloc.WorkspaceID, cause); err != nil {
		s.log.Error("record refused runner connection", "workspace", alloc.WorkspaceID, "err", err)
	}
	e := protocol.Errorf(protocol.CodeUnauthorized, "allocation %s already has a connected runner: a second connection is refused", alloc.ID)
	writeJSON(w, protocol.StatusAllocationBusy, api.ErrorBody{Error: *e})
}

// acceptHello reads the runner's hello on its first stream, rotates the runner's token (presented
// is the hash of the one it connected with) and answers with the welcome carrying the new one,
// which the runner's WelcomeAck confirms.
func (s *Server) acceptHello(sess *yamux.Session, alloc store.Allocation, presented string) (protocol.Hello, int, error) {
	var hello protocol.Hello
	timer := time.AfterFunc(helloTimeout, func() { sess.Close() })
	defer timer.Stop()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Runners.HeaderWait)
	defer cancel()
	st, err := sess.AcceptStreamWithContext(ctx)
	if err != nil {
		return hello, 0, err
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.cfg.Runners.HeaderWait))
	refuse := func(err *protocol.Error) (protocol.Hello, int, error) {
		_ = protocol.WriteJSON(st, protocol.Trailer{Error: err})
		return hello, 0, err
	}
	var h protocol.Header
	if err := protocol.ReadJSONLimit(st, &h, s.cfg.Runners.MaxHeader); err != nil {
		return hello, 0, err
	}
	if h.Op != protocol.OpHello {
		return refuse(protocol.Errorf(protocol.CodeInvalidArgument, "first operation must be hello, got %q", h.Op))
	}
	if err := protocol.ReadJSONLimit(st, &hello, maxHello); err != nil {
		return hello, 0, err
	}
	if hello.AllocationID != alloc.ID {
		return refuse(protocol.Errorf(protocol.CodeUnauthorized, "token belongs to another allocation"))
	}
	version, err := protocol.Negotiate(hello.ProtocolMin, hello.ProtocolMax)
	if err != nil {
		return refuse(protocol.AsError(err))
	}
	ws, err := s.store.GetWorkspace(s.ctx, alloc.WorkspaceID)
	if err != nil {
		return refuse(protocol.AsError(err))
	}
	// Rotated just before the welcome is sent: of two connections presenting the same token, one
	// wins, and the token stays good until the runner shows it holds the new one.
	session := newToken(prefixSession)
	if _, err := s.store.RotateSession(s.ctx, alloc.ID, presented, hashToken(session)); err != nil {
		return refuse(protocol.AsError(err))
	}
	welcome, err := json.Marshal(protocol.Welcome{Protocol: version, WorkspaceID: alloc.WorkspaceID, SessionToken: session, Epoch: ws.Epoch})
	if err != nil {
		return hello, 0, err
	}
	if err := protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: welcome}); err != nil {
		return hello, 0, err
	}
	var ack protocol.WelcomeAck
	switch err := protocol.ReadJSONLimit(st, &ack, s.cfg.Runners.MaxHeader); {
	case err != nil:
		// A runner that sends no ack keeps its previous token working until it presents the new
		// one; nothing else is lost.
		s.log.Info("runner did not confirm its new session token", "allocation", alloc.ID, "err", err)
	case ack.SessionTokenSHA256 != hashToken(session):
		s.log.Warn("runner confirmed another session token than it was sent", "allocation", alloc.ID)
	default:
		if _, err := s.store.ConfirmSession(s.ctx, alloc.ID, hashToken(session)); err != nil {
			s.log.Error("confirm runner session token", "allocation", alloc.ID, "err", err)
		}
	}
	return hello, version, nil
}

// runnerOps serve the operations a runner opens once its hello was accepted (acceptHello): one
// entry per runner→controller operation of protocol.Ops but OpHello (a test holds them
// together); any other is unsupported (serveRunnerOp).
var runnerOps = map[string]func(s *Server, c *hub.Conn, st *yamux.Stream, h protocol.Header){
	protocol.OpArtifactFetch:     (*Server).serveArtifactFetch,
	protocol.OpArtifactInstalled: answered((*Server).artifactInstalled),
	protocol.OpRunExited:         answered((*Server).runExited),
	protocol.OpUsageReport:       answered((*Server).usageReport),
}

// answered serves a runner operation answered by one trailer.
func answered(fn func(s *Server, c *hub.Conn, h protocol.Header) protocol.Trailer) func(*Server, *hub.Conn, *yamux.Stream, protocol.Header) {
	return func(s *Server, c *hub.Conn, st *yamux.Stream, h protocol.Header) {
		_ = protocol.WriteJSON(st, fn(s, c, h))
	}
}

// runExited settles a run the runner reports finished after its exec stream was lost.
func (s *Server) runExited(c *hub.Conn, h protocol.Header) protocol.Trailer {
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
			err = s.store.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunLost, Error: "the runner no longer knows this run", At: s.now()})
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
	if note, ok := s.stoppingRuns.Load(runID); ok && exit.Error == nil {
		exit.Error = &protocol.Error{Code: protocol.CodeCanceled, Message: note.(string)}
	}
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
	if err := s.store.FinishRun(ctx, store.RunFinish{ID: runID, State: state, ExitCode: code, Signal: exit.Signal, Error: msg, At: s.now()}); err != nil {
		return fmt.Errorf("finish run %s: %w", runID, err)
	}
	// A run is activity all the time it runs: the idle time counts from its end.
	if run, err := s.store.GetRun(ctx, runID); err == nil {
		s.activity.touch(run.WorkspaceID, s.now())
	}
	return nil
}
