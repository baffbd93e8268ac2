package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/internal/routine"
	"github.com/tetherhq/tether/protocol"
)

// execReconnectWait bounds how long an exec whose runner connection ended before the run was
// sent waits for the runner to be reachable again: the client's own retry budget.
const execReconnectWait = 5 * time.Second

// cancelGrace bounds how long the controller waits for the exit of a command it canceled
// because the client went away, to record it.
const cancelGrace = 10 * time.Second

var clientUpgrader = websocket.Upgrader{
	ReadBufferSize: 64 << 10, WriteBufferSize: 256 << 10, EnableCompression: false,
	// The operator API is bearer-token authenticated, never cookie-based: no CSRF to guard.
	CheckOrigin: func(*http.Request) bool { return true },
}

// handleExec bridges a client's websocket to an exec stream on the runner. The client sends the
// ExecArgs as its first message, then frames ([channel][payload]) for stdin and control; it gets
// started, stdout, stderr and exit frames back. The run is recorded before it starts and settled
// when the exit arrives.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	// The runner is reached here, before the upgrade, and that connection is the one used: a
	// refusal before the upgrade is an HTTP answer the client retries (nothing ran), one after it
	// is not. Reaching it again after the upgrade failed execs in a rolling restart, when the
	// runner's owner, draining, disowned it in between.
	ws, rc, epoch, err := s.writer(r)
	if err != nil {
		writeError(w, err)
		return
	}
	conn, err := clientUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetReadLimit(protocol.MaxChannelFrame + 64)
	fail := func(err error) { failExec(conn, err) }
	var args protocol.ExecArgs
	if _, first, err := conn.ReadMessage(); err != nil {
		return
	} else if err := json.Unmarshal(first, &args); err != nil {
		fail(protocol.Errorf(protocol.CodeInvalidArgument, "exec arguments: %v", err))
		return
	}
	if len(args.Argv) == 0 || args.Argv[0] == "" {
		fail(protocol.Errorf(protocol.CodeInvalidArgument, "exec needs a command"))
		return
	}
	args.RunID = newID("run_")
	run := api.Run{ID: args.RunID, WorkspaceID: ws.ID, AllocationID: ws.AllocationID, Argv: args.Argv,
		Cwd: args.Cwd, State: api.RunRunning, Epoch: epoch, StartedAt: s.now()}
	if err := s.store.CreateRun(r.Context(), run); err != nil {
		fail(err)
		return
	}
	st, err := rc.Open(protocol.OpExec, args.RunID, epoch, args)
	if err != nil && !hub.MaybeSent(err) && closed(rc) {
		// The connection ended before anything of the run was sent, so nothing ran: its owner
		// went away since the reach above (a controller draining for a restart closes its
		// runners' connections once no stream is open on them, and this run had none yet), and
		// the runner is reconnecting. The run starts on its next connection, wherever it lands,
		// as the client would have retried it had the refusal come before the upgrade.
		wctx, cancel := context.WithTimeout(r.Context(), execReconnectWait)
		next, werr := s.waitRunner(wctx, ws.AllocationID)
		cancel()
		if werr == nil {
			rc = next
			st, err = rc.Open(protocol.OpExec, args.RunID, epoch, args)
		}
	}
	if hub.MaybeSent(err) {
		// The runner may have started the command: its next hello settles the record (with the
		// exit, or as lost if it never heard of the run), as for a run whose socket dropped later.
		s.settleIfReconnected(rc, run.ID)
		fail(protocol.Errorf(protocol.CodeUnavailable,
			"lost the connection to the runner while starting run %s; it is settled when the runner reconnects", run.ID))
		return
	}
	if err != nil {
		_ = s.store.FinishRun(s.ctx, store.RunFinish{ID: run.ID, State: api.RunFailed, Error: err.Error(), At: s.now()})
		fail(err)
		return
	}
	defer st.Close()
	b := &execBridge{s: s, client: conn, stream: st, runner: protocol.NewChannelWriter(st), runID: run.ID,
		record: context.WithoutCancel(r.Context())}
	b.serve()
}

// failExec tells the client why its exec ends and closes the websocket normally.
func failExec(conn *websocket.Conn, err error) {
	msg := append([]byte{byte(protocol.ChanError)}, mustJSON(protocol.AsError(err))...)
	_ = conn.WriteMessage(websocket.BinaryMessage, msg)
	_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
}

// execBridge joins a client's exec websocket to the runner's exec stream of one recorded run.
// Its two directions are named routines of a group of its own, under the controller's context:
//
//   - "exec output <run>" (runner → client) is the websocket's only writer. It ends with the
//     exit frame, which it records and forwards before closing the websocket normally, or when
//     the runner stream fails: the runner's socket dropped (the command goes on detached and is
//     settled when the runner reconnects), the stream was given up on after a cancel, or the
//     controller is shutting down (which closes the stream).
//   - "exec input <run>" (client → runner) is the stream's only writer: stdin and control
//     frames. When the client goes away while the run goes on, it sends the runner a cancel and
//     gives it cancelGrace to report the exit, then closes the stream. It ends then, or as soon
//     as the output ended.
//
// serve returns once both have ended.
type execBridge struct {
	s      *Server
	client *websocket.Conn
	stream io.ReadWriteCloser
	runner *protocol.ChannelWriter // frames to the runner, over stream
	runID  string
	record context.Context // the run's exit is recorded under it: the request's, never canceled
}

func (b *execBridge) serve() {
	g := routine.New(b.s.ctx, b.s.log)
	outputDone := make(chan struct{})
	g.Go("exec output "+b.runID, func(ctx context.Context) {
		defer close(outputDone)
		b.pumpOutput(ctx)
	})
	g.Go("exec input "+b.runID, func(ctx context.Context) { b.pumpInput(ctx, outputDone) })
	<-outputDone
	// Nothing more to bridge: closing both ends ends the input pump's read or write.
	b.stream.Close()
	b.client.Close()
	g.Stop()
}

// pumpOutput forwards the runner's frames to the client in order until the exit frame or the
// stream's failure; ctx's end (the controller's shutdown) closes the stream.
func (b *execBridge) pumpOutput(ctx context.Context) {
	defer context.AfterFunc(ctx, func() { b.stream.Close() })()
	clientOK := true // false once a write to the client failed: the run is still followed to its exit
	buf := make([]byte, 256<<10)
	msg := make([]byte, 0, 256<<10+1)
	for {
		ch, p, err := protocol.ReadFrame(b.stream, buf)
		if err != nil {
			// The runner's socket dropped: the command keeps running there, detached; the
			// record is settled when the runner reconnects and reports it.
			if clientOK {
				failExec(b.client, protocol.Errorf(protocol.CodeUnavailable,
					"lost the connection to the runner; run %s goes on detached and is settled when the runner reconnects", b.runID))
			}
			return
		}
		if ch == protocol.ChanExit {
			var exit protocol.ExecExit
			if err := json.Unmarshal(p, &exit); err != nil {
				exit = protocol.ExecExit{ExitCode: -1, Error: protocol.Errorf(protocol.CodeInternal, "bad exit frame: %v", err)}
			}
			if err := b.s.finishRun(b.record, b.runID, exit); err != nil {
				b.s.log.Error("record run exit", "run", b.runID, "err", err)
			}
		}
		if clientOK {
			msg = append(append(msg[:0], byte(ch)), p...)
			if err := b.client.WriteMessage(websocket.BinaryMessage, msg); err != nil {
				clientOK = false
			}
		}
		if ch == protocol.ChanExit {
			if clientOK {
				_ = b.client.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			}
			return
		}
	}
}

// pumpInput forwards the client's input until the client goes away (or the stream refuses it);
// then, unless the output already ended, it cancels the command and waits for the output to end
// for at most cancelGrace before giving up on the stream.
func (b *execBridge) pumpInput(ctx context.Context, outputDone <-chan struct{}) {
	b.forwardInput()
	select {
	case <-outputDone:
		return
	default:
	}
	_ = b.runner.WriteJSONFrame(protocol.ChanControl, protocol.ExecControl{Cancel: true})
	grace := time.NewTimer(cancelGrace)
	defer grace.Stop()
	select {
	case <-outputDone:
	case <-grace.C:
		b.stream.Close()
	case <-ctx.Done():
		// The controller is shutting down: the output pump closes the stream.
	}
}

// forwardInput passes the client's stdin and control frames to the runner, dropping any other
// channel, until a read from the client or a write to the runner fails.
func (b *execBridge) forwardInput() {
	for {
		_, msg, err := b.client.ReadMessage()
		if err != nil {
			return
		}
		if len(msg) == 0 {
			continue
		}
		ch := protocol.Channel(msg[0])
		if ch != protocol.ChanStdin && ch != protocol.ChanControl {
			continue
		}
		if err := b.runner.WriteFrame(ch, msg[1:]); err != nil {
			return
		}
	}
}

// settleIfReconnected covers a hello that came before the run was recorded: when the runner has
// already said hello again without the run, no later hello would settle it. It is recorded lost;
// a report that it ran after all (it was received, but started after that hello) corrects that.
func (s *Server) settleIfReconnected(old *hub.Conn, runID string) {
	cur, ok := s.runnerOf(s.ctx, old.AllocationID)
	if !ok || cur == old || slices.ContainsFunc(cur.Hello.Runs, func(r protocol.RunStatus) bool { return r.RunID == runID }) {
		return
	}
	if err := s.store.FinishRun(s.ctx, store.RunFinish{ID: runID, State: api.RunLost, Error: "the runner reconnected without this run", At: s.now()}); err != nil {
		s.log.Error("settle run", "run", runID, "err", err)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
