package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

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
	ws, _, epoch, err := s.writer(r)
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
	fail := func(err error) {
		msg := append([]byte{byte(protocol.ChanError)}, mustJSON(protocol.AsError(err))...)
		_ = conn.WriteMessage(websocket.BinaryMessage, msg)
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	}
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
	rc, ok := s.hub.Get(ws.AllocationID)
	if !ok {
		fail(protocol.Errorf(protocol.CodeUnavailable, "the runner of workspace %s is not connected", ws.ID))
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
	cw := protocol.NewChannelWriter(st)

	// Client → runner: stdin and control. When the client goes away, cancel the command.
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		for {
			_, msg, err := conn.ReadMessage()
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
			if err := cw.WriteFrame(ch, msg[1:]); err != nil {
				return
			}
		}
	}()
	go func() {
		select {
		case <-clientGone:
			_ = cw.WriteJSONFrame(protocol.ChanControl, protocol.ExecControl{Cancel: true})
			// Give the runner time to report the exit, then give up on the stream.
			time.AfterFunc(cancelGrace, func() { st.Close() })
		case <-s.ctx.Done():
			st.Close()
		}
	}()

	// Runner → client, in order; this goroutine is the websocket's only writer.
	clientOK := true
	buf := make([]byte, 256<<10)
	msg := make([]byte, 0, 256<<10+1)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			// The runner's socket dropped: the command keeps running there, detached; the
			// record is settled when the runner reconnects and reports it.
			if clientOK {
				fail(protocol.Errorf(protocol.CodeUnavailable,
					"lost the connection to the runner; run %s goes on detached and is settled when the runner reconnects", run.ID))
			}
			return
		}
		if ch == protocol.ChanExit {
			var exit protocol.ExecExit
			if err := json.Unmarshal(p, &exit); err != nil {
				exit = protocol.ExecExit{ExitCode: -1, Error: protocol.Errorf(protocol.CodeInternal, "bad exit frame: %v", err)}
			}
			if err := s.finishRun(context.WithoutCancel(r.Context()), run.ID, exit); err != nil {
				s.log.Error("record run exit", "run", run.ID, "err", err)
			}
		}
		if clientOK {
			msg = append(append(msg[:0], byte(ch)), p...)
			if err := conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
				clientOK = false
			}
		}
		if ch == protocol.ChanExit {
			if clientOK {
				_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			}
			return
		}
	}
}

// settleIfReconnected covers a hello that came before the run was recorded: when the runner has
// already said hello again without the run, no later hello would settle it. It is recorded lost;
// a report that it ran after all (it was received, but started after that hello) corrects that.
func (s *Server) settleIfReconnected(old *hub.Conn, runID string) {
	cur, ok := s.hub.Get(old.AllocationID)
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
