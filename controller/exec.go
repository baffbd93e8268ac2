package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
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

var clientUpgrader = websocket.Upgrader{
	ReadBufferSize: 64 << 10, WriteBufferSize: 256 << 10, EnableCompression: false,
	// The operator API is bearer-token authenticated, never cookie-based: no CSRF to guard.
	CheckOrigin: func(*http.Request) bool { return true },
}

// handleExec bridges a client's websocket to an exec stream on the runner. The client sends the
// ExecArgs as its first message, then frames ([channel][payload]) for stdin and control; it gets
// started (with the run id, which a client needs to reattach), stdout, stderr and exit frames
// back, or, with Detach, the started frame alone. The run is recorded before it starts and
// settled when the exit arrives. A repeat of an idempotency key with the same argv attaches to
// the key's run from offset 0 instead of starting another process.
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
	if args.TTY != nil && (args.TTY.Rows == 0 || args.TTY.Cols == 0) {
		fail(protocol.Errorf(protocol.CodeInvalidArgument, "a terminal of %dx%d cells", args.TTY.Cols, args.TTY.Rows))
		return
	}
	// The key is the controller's: the runner never sees it.
	key := args.IdempotencyKey
	args.IdempotencyKey = ""
	args.RunID = newID("run_")
	run := api.Run{ID: args.RunID, WorkspaceID: ws.ID, AllocationID: ws.AllocationID, Argv: args.Argv,
		Cwd: args.Cwd, State: api.RunRunning, Epoch: epoch, StartedAt: s.now(), IdempotencyKey: key}
	started := s.starts.begin(run.ID)
	defer started()
	if err := s.store.CreateRun(r.Context(), run); protocol.CodeOf(err) == protocol.CodeExists && key != "" {
		started()
		s.execRepeat(r.Context(), conn, ws.ID, key, args, epoch)
		return
	} else if err != nil {
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
		record: context.WithoutCancel(r.Context()), detach: args.Detach, started: started}
	b.serve()
}

// execRepeat answers an exec whose idempotency key a run of the workspace already has: the
// same argv is that run (attached from offset 0, or its id alone with Detach), another one is
// a conflict.
func (s *Server) execRepeat(ctx context.Context, conn *websocket.Conn, workspaceID, key string, args protocol.ExecArgs, epoch uint64) {
	run, err := s.store.RunByIdempotencyKey(ctx, workspaceID, key)
	if err != nil {
		failExec(conn, err)
		return
	}
	if !slices.Equal(run.Argv, args.Argv) {
		failExec(conn, protocol.Errorf(protocol.CodeConflict, "idempotency key %q is run %s, of another command (%s)", key, run.ID, strings.Join(run.Argv, " ")))
		return
	}
	if args.Detach {
		s.starts.wait(ctx, run.ID)
		_ = conn.WriteMessage(websocket.BinaryMessage, append([]byte{byte(protocol.ChanStarted)}, mustJSON(protocol.ExecStarted{RunID: run.ID, TTY: args.TTY != nil})...))
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		return
	}
	s.attachBridge(ctx, conn, run, protocol.RunAttachArgs{RunID: run.ID, Stdin: args.Stdin}, epoch)
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
//     frames. When the client goes away while the run goes on, it closes the stream: the run
//     goes on, detached, for a reattach (see pumpInput).
//
// serve returns once both have ended.
type execBridge struct {
	s      *Server
	client *websocket.Conn
	stream io.ReadWriteCloser
	runner *protocol.ChannelWriter // frames to the runner, over stream
	runID  string
	record context.Context // the run's exit is recorded under it: the request's, never canceled
	// detach ends the bridge after the started frame: the command runs on alone.
	detach bool
	// started, when set, is called once the runner's first frame (or the stream's end) came:
	// repeats of the run's idempotency key wait for it before attaching.
	started func()
	// first, when set, is the runner's first frame, read already (an attach checks it).
	first *frame
	// cursor checks the output's offsets (it starts at an attach's): a gap the runner reports
	// must continue the output, or the client would resume at the wrong byte.
	cursor protocol.LogCursor
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
		var ch protocol.Channel
		var p []byte
		var err error
		if b.first != nil {
			ch, p, err = b.first.ch, b.first.p, b.first.err
			b.first = nil
		} else {
			ch, p, err = protocol.ReadFrame(b.stream, buf)
		}
		if b.started != nil {
			b.started()
		}
		if err != nil {
			// The runner's socket dropped: the command keeps running there, detached; the
			// record is settled when the runner reconnects and reports it.
			if clientOK {
				failExec(b.client, protocol.Errorf(protocol.CodeUnavailable,
					"lost the connection to the runner; run %s goes on detached and is settled when the runner reconnects", b.runID))
			}
			return
		}
		switch ch {
		case protocol.ChanStdout, protocol.ChanStderr:
			b.cursor.Data(ch, len(p))
		case protocol.ChanGap:
			g, err := b.cursor.Gap(p)
			if err != nil {
				// The runner broke the offset rule: what follows cannot be placed.
				b.s.log.Warn("run output from the runner refused", "run", b.runID, "err", err)
				if clientOK {
					failExec(b.client, err)
				}
				return
			}
			p = mustJSON(g)
		case protocol.ChanStarted, protocol.ChanExit:
		default:
			continue // no other channel travels from the runner to the client
		}
		if ch == protocol.ChanStarted {
			// The run id travels in every started frame, whatever the runner sent: a client
			// reattaches by it.
			var started protocol.ExecStarted
			_ = json.Unmarshal(p, &started)
			started.RunID = b.runID
			p = mustJSON(started)
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
		if ch == protocol.ChanExit || (ch == protocol.ChanStarted && b.detach) {
			if clientOK {
				_ = b.client.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			}
			return
		}
	}
}

// pumpInput forwards the client's input until the client goes away (or the stream refuses it).
// A client that went away without a cancel leaves the run running, as docker exec does: the
// bridge lets go of the stream, the runner keeps the output in the run's log for a reattach
// and reports the exit itself (run_exited). A client that wants the run ended says so with a
// cancel control frame, which is forwarded like any other.
func (b *execBridge) pumpInput(ctx context.Context, outputDone <-chan struct{}) {
	b.forwardInput()
	select {
	case <-outputDone:
	case <-ctx.Done():
	default:
		b.stream.Close()
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
