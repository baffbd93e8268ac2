package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
	"golang.org/x/sys/unix"
)

// Durable runs on the operator API: a run's log (GET /v1/runs/{id}/logs), a reattach
// (GET /v1/runs/{id}/attach, a websocket like exec's), a signal and a wait. The runner keeps
// the log; the controller bridges to the runner that holds the run (its allocation's, reached
// through its owner in a cluster) and bounds and checks what comes back.

// ContentTypeFrames is the media type of a run log's body: channel frames as on the runner's
// stream (protocol.WriteFrame), ChanStdout/ChanStderr data, ChanGap and ChanLogEnd last, or
// one ChanError when the read failed after the answer began.
const ContentTypeFrames = "application/x-tether-frames"

// attachStartWait bounds how long a reattach waits for a run it finds recorded but unknown to
// the runner yet: a repeat of an idempotency key racing the first request's start.
const attachStartWait = 10 * time.Second

// runStarts marks the runs this controller is starting, so a repeat of their idempotency key
// attaches only once the runner knows the run.
type runStarts struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// begin marks runID as starting; the returned func (idempotent) marks it started.
func (r *runStarts) begin(runID string) func() {
	ch := make(chan struct{})
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]chan struct{}{}
	}
	r.m[runID] = ch
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.m, runID)
			r.mu.Unlock()
			close(ch)
		})
	}
}

// wait returns once runID is not starting on this controller (or ctx ended).
func (r *runStarts) wait(ctx context.Context, runID string) {
	r.mu.Lock()
	ch := r.m[runID]
	r.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// currentEpoch is the epoch a read of the workspace runs under: its lease's, or its own.
func (s *Server) currentEpoch(ctx context.Context, ws api.Workspace) (uint64, error) {
	l, held, err := s.store.CurrentLease(ctx, ws.ID)
	if err != nil {
		return 0, err
	}
	if held {
		return l.Epoch, nil
	}
	return ws.Epoch, nil
}

// runEpoch is the epoch an operation on run runs under: a mutating one (mutate) passes the
// writer checks of exec, a read takes the current epoch.
func (s *Server) runEpoch(r *http.Request, run api.Run, mutate bool) (uint64, error) {
	ws, err := s.workspace(r.Context(), run.WorkspaceID)
	if err != nil {
		return 0, err
	}
	if mutate {
		return s.writerEpoch(r.Context(), ws, r)
	}
	return s.currentEpoch(r.Context(), ws)
}

// runExit is a settled run's exit as its record has it.
func runExit(run api.Run) protocol.ExecExit {
	exit := protocol.ExecExit{ExitCode: -1, Signal: run.Signal}
	if run.ExitCode != nil {
		exit.ExitCode = *run.ExitCode
	}
	if run.Error != "" && run.ExitCode == nil && run.Signal == 0 {
		code := protocol.CodeFailed
		if run.State == api.RunLost {
			code = protocol.CodeUnavailable
		}
		exit.Error = protocol.Errorf(code, "run %s %s: %s", run.ID, run.State, run.Error)
	}
	return exit
}

func (s *Server) handleRunAttach(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	_, rerr := s.reach(r.Context(), run.AllocationID)
	if rerr != nil && run.State == api.RunRunning {
		// Nothing was attached: the client retries this answer.
		writeError(w, rerr)
		return
	}
	conn, err := clientUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetReadLimit(protocol.MaxChannelFrame + 64)
	var args protocol.RunAttachArgs
	if _, first, err := conn.ReadMessage(); err != nil {
		return
	} else if err := json.Unmarshal(first, &args); err != nil {
		failExec(conn, protocol.Errorf(protocol.CodeInvalidArgument, "attach arguments: %v", err))
		return
	}
	args.RunID = run.ID
	if args.StdoutOffset < 0 || args.StderrOffset < 0 {
		failExec(conn, protocol.Errorf(protocol.CodeInvalidArgument, "negative offsets"))
		return
	}
	if rerr != nil {
		// Settled, and its runner (with the log) is gone: the record is all there is.
		_ = conn.WriteMessage(websocket.BinaryMessage, append([]byte{byte(protocol.ChanStarted)}, mustJSON(protocol.ExecStarted{RunID: run.ID})...))
		_ = conn.WriteMessage(websocket.BinaryMessage, append([]byte{byte(protocol.ChanExit)}, mustJSON(runExit(run))...))
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		return
	}
	epoch, err := s.runEpoch(r, run, args.Stdin)
	if err != nil {
		failExec(conn, err)
		return
	}
	s.attachBridge(r.Context(), conn, run, args, epoch)
}

// attachBridge opens a run_attach on the run's runner and bridges it to the client's websocket
// as exec does. A run recorded but not yet known to its runner (a repeat of an idempotency key
// racing the start on another controller) is tried again for attachStartWait.
func (s *Server) attachBridge(ctx context.Context, conn *websocket.Conn, run api.Run, args protocol.RunAttachArgs, epoch uint64) {
	s.starts.wait(ctx, run.ID)
	deadline := s.now().Add(attachStartWait)
	for {
		rc, err := s.reach(ctx, run.AllocationID)
		if err != nil {
			failExec(conn, err)
			return
		}
		st, err := rc.Open(protocol.OpRunAttach, "", epoch, args)
		if err != nil {
			failExec(conn, err)
			return
		}
		ch, p, err := readFirst(st)
		if err == nil && ch == protocol.ChanExit && notKnownYet(p) && s.now().Before(deadline) {
			st.Close()
			if cur, gerr := s.store.GetRun(ctx, run.ID); gerr == nil && cur.State == api.RunRunning {
				select {
				case <-time.After(100 * time.Millisecond):
					continue
				case <-ctx.Done():
					return
				}
			}
			failExec(conn, notKnownErr(p))
			return
		}
		b := &execBridge{s: s, client: conn, stream: st, runner: protocol.NewChannelWriter(st), runID: run.ID,
			record: context.WithoutCancel(ctx), first: &frame{ch: ch, p: p, err: err},
			cursor: protocol.LogCursor{Offsets: [2]int64{args.StdoutOffset, args.StderrOffset}}}
		b.serve()
		st.Close()
		return
	}
}

func notKnownErr(p []byte) error {
	var exit protocol.ExecExit
	_ = json.Unmarshal(p, &exit)
	return exit.Error
}

// notKnownYet says whether an exit frame is the runner's not_found for a run it does not know.
func notKnownYet(p []byte) bool {
	var exit protocol.ExecExit
	return json.Unmarshal(p, &exit) == nil && exit.Error != nil && exit.Error.Code == protocol.CodeNotFound
}

type frame struct {
	ch  protocol.Channel
	p   []byte
	err error
}

func readFirst(st interface{ Read([]byte) (int, error) }) (protocol.Channel, []byte, error) {
	buf := make([]byte, 64<<10)
	ch, p, err := protocol.ReadFrame(st, buf)
	return ch, p, err
}

// parseSignal reads a signal as a name (TERM, SIGTERM, term) or a number.
func parseSignal(v string) (int, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 || n > 64 {
			return 0, protocol.Errorf(protocol.CodeInvalidArgument, "signal %d does not exist", n)
		}
		return n, nil
	}
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if n := unix.SignalNum(name); n != 0 {
		return int(n), nil
	}
	return 0, protocol.Errorf(protocol.CodeInvalidArgument, "signal %q does not exist (want a name like TERM or INT, or a number)", v)
}

func (s *Server) handleRunSignal(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.RunSignalRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	raw := string(req.Signal)
	var name string
	if json.Unmarshal(req.Signal, &name) == nil {
		raw = name
	}
	sig, err := parseSignal(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	if run.State != api.RunRunning {
		writeError(w, protocol.Errorf(protocol.CodeConflict, "run %s already ended (%s)", run.ID, run.State))
		return
	}
	epoch, err := s.runEpoch(r, run, true)
	if err != nil {
		writeError(w, err)
		return
	}
	rc, err := s.reach(r.Context(), run.AllocationID)
	if err != nil {
		writeError(w, err)
		return
	}
	var st protocol.RunStatus
	if err := rc.Call(r.Context(), protocol.OpRunSignal, epoch, protocol.RunSignalArgs{RunID: run.ID, Signal: sig}, &st); err != nil {
		writeError(w, err)
		return
	}
	run.Log = st.Output
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) handleRunShow(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	run.Log = s.runLog(r.Context(), run)
	writeJSON(w, http.StatusOK, run)
}

// runLog asks the run's runner what its log holds; nil when it cannot be reached or does not
// say.
func (s *Server) runLog(ctx context.Context, run api.Run) *protocol.RunOutput {
	if run.Kind != "" {
		return nil
	}
	rc, err := s.reach(ctx, run.AllocationID)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	end, err := s.readLogEnd(ctx, rc, protocol.RunLogsArgs{RunID: run.ID, NoOutput: true})
	if err != nil {
		return nil
	}
	return end.Output
}

// readLogEnd runs a run_logs that sends no output and returns its end frame.
func (s *Server) readLogEnd(ctx context.Context, rc *hub.Conn, args protocol.RunLogsArgs) (protocol.LogEnd, error) {
	args.NoOutput = true
	st, err := rc.Open(protocol.OpRunLogs, "", 0, args)
	if err != nil {
		return protocol.LogEnd{}, err
	}
	defer st.Close()
	defer context.AfterFunc(ctx, func() { st.Close() })()
	buf := make([]byte, 64<<10)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			if ctx.Err() != nil {
				return protocol.LogEnd{}, ctx.Err()
			}
			return protocol.LogEnd{}, protocol.Errorf(protocol.CodeUnavailable, "run %s: the runner's stream ended: %v", args.RunID, err)
		}
		switch ch {
		case protocol.ChanError:
			var e protocol.Error
			if json.Unmarshal(p, &e) != nil {
				return protocol.LogEnd{}, protocol.Errorf(protocol.CodeInternal, "bad error frame from the runner")
			}
			return protocol.LogEnd{}, &e
		case protocol.ChanLogEnd:
			var end protocol.LogEnd
			if err := json.Unmarshal(p, &end); err != nil {
				return end, protocol.Errorf(protocol.CodeInternal, "bad log end frame from the runner: %v", err)
			}
			return end, nil
		}
	}
}

// handleRunWait blocks until the run ended and answers its record: at once when it is
// settled, else by waiting on its runner (a run_logs that only follows to the end), across
// the runner's reconnects.
func (s *Server) handleRunWait(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	run, err := s.run(ctx, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	for run.State == api.RunRunning {
		rc, err := s.reach(ctx, run.AllocationID)
		if err != nil {
			// The run's record is settled when its runner says hello again (or the workspace
			// goes): wait for that, a while at a time, re-reading the record between.
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, werr := s.waitRunner(wctx, run.AllocationID); werr != nil && wctx.Err() == nil {
				<-wctx.Done() // no such allocation to wait on: do not spin on the store
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
		} else {
			end, err := s.readLogEnd(ctx, rc, protocol.RunLogsArgs{RunID: run.ID, Follow: true})
			switch {
			case ctx.Err() != nil:
				return
			case err == nil && end.Finished && end.Exit != nil:
				if cur, gerr := s.store.GetRun(ctx, run.ID); gerr == nil && cur.State == api.RunRunning {
					if ferr := s.finishRun(context.WithoutCancel(ctx), run.ID, *end.Exit); ferr != nil {
						s.log.Error("record run exit", "run", run.ID, "err", ferr)
					}
				}
			case protocol.CodeOf(err) == protocol.CodeNotFound:
				// The runner does not know the run: its hello settles the record (lost).
				if cur, gerr := s.store.GetRun(ctx, run.ID); gerr == nil && cur.State == api.RunRunning && s.now().Sub(cur.StartedAt) > attachStartWait {
					_ = s.store.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunLost, Error: "the runner no longer knows this run", At: s.now()})
				}
			}
			if err != nil && ctx.Err() == nil {
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
					return
				}
			}
		}
		if run, err = s.run(ctx, run.ID); err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, run)
}
