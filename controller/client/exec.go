package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tetherhq/tether/protocol"
)

// cancelWait bounds how long Exec waits for the exit of a command it canceled.
const cancelWait = 15 * time.Second

// DefaultReattachFor is how long a client whose run stream was lost after the run started
// (the controller restarted, the runner's socket dropped) keeps trying to reattach before it
// gives up and says how to reattach by hand.
const DefaultReattachFor = 60 * time.Second

// ExecIO is what a run stream is wired to.
type ExecIO struct {
	Stdin          io.Reader // nil: no input
	Stdout, Stderr io.Writer
	// Resize, when set, carries a terminal's new sizes to a TTY run.
	Resize <-chan protocol.WinSize
	// Started, when set, is called once with the run's started frame (its run id).
	Started func(protocol.ExecStarted)
	// Gap, when set, is called for bytes of the output the run's log no longer held.
	Gap func(protocol.LogGap)
	// Reattaching, when set, is called each time the stream was lost and a reattach begins.
	Reattaching func(runID string, err error)
	// LeaveOnCancel makes ctx's end leave the run running (the stream is closed) instead of
	// canceling it.
	LeaveOnCancel bool
	// ReattachFor bounds the reattach after a loss (0: DefaultReattachFor; < 0: never).
	ReattachFor time.Duration
}

// RunResult is how a run stream ended.
type RunResult struct {
	RunID    string
	Exit     protocol.ExecExit
	Detached bool // the stream ended after the start, as asked (Detach)
	// Offsets are the bytes of stdout and stderr received (the offsets to resume from).
	Offsets [2]int64
}

// Exec runs a command in the workspace, streaming stdin (when not nil) to it and its stdout and
// stderr back. Canceling ctx kills the command's whole process group; Exec then still waits
// briefly for the runner to confirm, so the returned exit says how it ended.
func (c *Client) Exec(ctx context.Context, id string, args protocol.ExecArgs, stdin io.Reader, stdout, stderr io.Writer) (protocol.ExecExit, error) {
	res, err := c.ExecRun(ctx, id, args, ExecIO{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	return res.Exit, err
}

// ExecRun runs a command as Exec does, with a terminal (args.TTY), detached (args.Detach: it
// returns once the run started, with its id) or under an idempotency key (a repeat with the
// same argv is the same run). Once the run started, a lost stream (not ctx's end) is
// reattached from the bytes received, so nothing is lost or doubled; a loss for good is
// CodeUnavailable with the run id in the result.
func (c *Client) ExecRun(ctx context.Context, id string, args protocol.ExecArgs, o ExecIO) (RunResult, error) {
	args.Stdin = o.Stdin != nil
	first, err := json.Marshal(args)
	if err != nil {
		return RunResult{}, err
	}
	s := &runStream{c: c, io: o, detach: args.Detach}
	return s.run(ctx, "/v1/workspaces/"+url.PathEscape(id)+"/exec", first)
}

// AttachRun reconnects to a run from the given stdout and stderr offsets: its output from
// there, stdin (when o.Stdin is set) and, once it ended, its exit. A finished run's attach
// sends the rest of its log and its exit.
func (c *Client) AttachRun(ctx context.Context, runID string, stdoutOffset, stderrOffset int64, o ExecIO) (RunResult, error) {
	s := &runStream{c: c, io: o, res: RunResult{RunID: runID, Offsets: [2]int64{stdoutOffset, stderrOffset}}, started: true}
	return s.attach(ctx, nil)
}

// runStream is one run's stream to the client, across reattaches.
type runStream struct {
	c       *Client
	io      ExecIO
	detach  bool
	started bool // a started frame came: the run exists, a loss is reattached
	res     RunResult

	mu      sync.Mutex
	conn    *websocket.Conn // the current websocket; nil between attaches
	pumping bool            // the stdin pump runs
}

func (s *runStream) send(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return errors.New("no run stream")
	}
	return s.conn.WriteMessage(websocket.BinaryMessage, p)
}

func (s *runStream) setConn(conn *websocket.Conn) {
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
}

// run opens the exec stream and follows it; after the start, a lost stream is reattached.
func (s *runStream) run(ctx context.Context, path string, first []byte) (RunResult, error) {
	conn, err := s.c.dialRun(ctx, path)
	if err != nil {
		return s.res, err
	}
	if err := conn.WriteMessage(websocket.BinaryMessage, first); err != nil {
		conn.Close()
		return s.res, protocol.Errorf(protocol.CodeUnavailable, "exec: %v", err)
	}
	done, err := s.follow(ctx, conn)
	if done || !s.started || ctx.Err() != nil {
		return s.res, err
	}
	return s.attach(ctx, err)
}

// attach (re)attaches to s.res.RunID from its offsets until the run's exit, a refusal, ctx's
// end, or the reattach budget is spent after a loss (lost: the loss that started it, or nil).
func (s *runStream) attach(ctx context.Context, lost error) (RunResult, error) {
	budget := s.io.ReattachFor
	if budget == 0 {
		budget = DefaultReattachFor
	}
	if lost != nil && budget < 0 {
		return s.res, s.lostErr(lost)
	}
	deadline := time.Now().Add(budget)
	wait := 100 * time.Millisecond
	for {
		if lost != nil && s.io.Reattaching != nil {
			s.io.Reattaching(s.res.RunID, lost)
		}
		cl := s.c.WithRetryFor(max(time.Until(deadline), 0))
		conn, err := cl.dialRun(ctx, "/v1/runs/"+url.PathEscape(s.res.RunID)+"/attach")
		if err == nil {
			first, _ := json.Marshal(protocol.RunAttachArgs{RunID: s.res.RunID, StdoutOffset: s.res.Offsets[0], StderrOffset: s.res.Offsets[1],
				Stdin: s.io.Stdin != nil})
			if err = conn.WriteMessage(websocket.BinaryMessage, first); err != nil {
				conn.Close()
				err = protocol.Errorf(protocol.CodeUnavailable, "attach: %v", err)
			} else {
				var done bool
				if done, err = s.follow(ctx, conn); done {
					return s.res, err
				}
				// Progress resets the budget: it bounds a loss, not a run.
				deadline, wait = time.Now().Add(budget), 100*time.Millisecond
			}
		}
		switch {
		case ctx.Err() != nil:
			return s.res, ctx.Err()
		case protocol.CodeOf(err) != protocol.CodeUnavailable:
			return s.res, err
		case lost == nil && budget < 0, time.Now().After(deadline):
			return s.res, s.lostErr(err)
		}
		lost = err
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return s.res, ctx.Err()
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func (s *runStream) lostErr(err error) error {
	return protocol.Errorf(protocol.CodeUnavailable, "lost the stream of run %s: %v", s.res.RunID, err)
}

// follow reads one websocket until the run's exit or a refusal (done), or its loss (not done,
// an unavailable error). The websocket is closed when it returns.
func (s *runStream) follow(ctx context.Context, conn *websocket.Conn) (done bool, _ error) {
	conn.SetReadLimit(protocol.MaxChannelFrame + 64)
	s.setConn(conn)
	defer func() {
		s.setConn(nil)
		conn.Close()
	}()
	stop := make(chan struct{})
	defer close(stop)
	go s.watch(ctx, conn, stop)
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				s.res.Exit = protocol.ExecExit{Canceled: true, ExitCode: -1}
				return true, ctx.Err()
			}
			if s.detach && s.started {
				return true, nil
			}
			return false, protocol.Errorf(protocol.CodeUnavailable, "run stream ended before the command's exit: %v", err)
		}
		if len(msg) == 0 {
			continue
		}
		p := msg[1:]
		switch protocol.Channel(msg[0]) {
		case protocol.ChanStarted:
			var st protocol.ExecStarted
			if err := json.Unmarshal(p, &st); err != nil {
				return true, protocol.Errorf(protocol.CodeInternal, "bad started frame: %v", err)
			}
			if st.RunID != "" {
				s.res.RunID = st.RunID
			}
			if !s.started {
				s.started = true
				if s.io.Started != nil {
					s.io.Started(st)
				}
			}
			s.startStdin()
			if s.detach {
				s.res.Detached = true
			}
		case protocol.ChanStdout:
			if _, err := s.io.Stdout.Write(p); err != nil {
				return true, err
			}
			s.res.Offsets[0] += int64(len(p))
		case protocol.ChanStderr:
			if _, err := s.io.Stderr.Write(p); err != nil {
				return true, err
			}
			s.res.Offsets[1] += int64(len(p))
		case protocol.ChanGap:
			cur := protocol.LogCursor{Offsets: s.res.Offsets}
			g, err := cur.Gap(p)
			if err != nil {
				return true, err
			}
			s.res.Offsets = cur.Offsets
			if s.io.Gap != nil {
				s.io.Gap(g)
			}
		case protocol.ChanExit:
			var exit protocol.ExecExit
			if err := json.Unmarshal(p, &exit); err != nil {
				return true, protocol.Errorf(protocol.CodeInternal, "bad exit frame: %v", err)
			}
			s.res.Exit = exit
			if exit.Error != nil && exit.ExitCode < 0 && exit.Signal == 0 {
				return true, exit.Error
			}
			return true, nil
		case protocol.ChanError:
			var e protocol.Error
			if err := json.Unmarshal(p, &e); err != nil {
				return true, protocol.Errorf(protocol.CodeInternal, "bad error frame: %v", err)
			}
			// Unavailable after the start (the runner's socket dropped): reattach.
			return e.Code != protocol.CodeUnavailable || !s.started, &e
		}
	}
}

// watch sends a cancel when ctx ends (and stops waiting for its exit after cancelWait), and
// forwards terminal resizes, until stop.
func (s *runStream) watch(ctx context.Context, conn *websocket.Conn, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case ws, ok := <-s.io.Resize:
			if !ok {
				s.io.Resize = nil
				continue
			}
			ctl, _ := json.Marshal(protocol.ExecControl{Resize: &ws})
			_ = s.send(append([]byte{byte(protocol.ChanControl)}, ctl...))
		case <-ctx.Done():
			if s.io.LeaveOnCancel {
				conn.Close()
				return
			}
			ctl, _ := json.Marshal(protocol.ExecControl{Cancel: true})
			_ = s.send(append([]byte{byte(protocol.ChanControl)}, ctl...))
			select {
			case <-time.After(cancelWait):
				conn.Close()
			case <-stop:
			}
			return
		}
	}
}

// startStdin starts the one stdin pump of the stream, once the run started: input goes to the
// current websocket, whichever attach it is.
func (s *runStream) startStdin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.io.Stdin == nil || s.pumping || s.detach {
		return
	}
	s.pumping = true
	go s.pumpStdin()
}

func (s *runStream) pumpStdin() {
	buf := make([]byte, 256<<10)
	for {
		n, err := s.io.Stdin.Read(buf[1:])
		if n > 0 {
			buf[0] = byte(protocol.ChanStdin)
			// Input sent while no stream is attached is lost, as keystrokes to a terminal
			// whose connection is down are.
			_ = s.send(buf[:n+1])
		}
		if err != nil {
			// EOF or not, the command will get no more input; tell it so it does not wait forever.
			_ = s.send([]byte{byte(protocol.ChanStdin)})
			return
		}
	}
}

// dialRun opens a run websocket at path. A command starts only once its arguments are sent over
// the open socket, so a dial that failed before the upgrade (the controller unavailable, the
// connection refused or dropped) ran nothing and is retried under the retry policy; nothing
// after the upgrade ever is.
func (c *Client) dialRun(ctx context.Context, path string) (*websocket.Conn, error) {
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += path
	h := http.Header{}
	h.Set("Authorization", protocol.Bearer(c.token))
	if c.epoch > 0 {
		h.Set(headerEpoch, strconv.FormatUint(c.epoch, 10))
	}
	if c.wake {
		h.Set(headerWake, "true")
	}
	dialer := websocket.Dialer{EnableCompression: false, ReadBufferSize: 256 << 10, WriteBufferSize: 64 << 10, HandshakeTimeout: 30 * time.Second}
	var conn *websocket.Conn
	err := c.withRetries(ctx, func() (bool, error) {
		var resp *http.Response
		var err error
		conn, resp, err = dialer.DialContext(ctx, u.String(), h)
		switch {
		case err == nil:
			return false, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		case resp != nil && resp.StatusCode/100 != 2:
			err := decodeError(resp)
			return protocol.CodeOf(err) == protocol.CodeUnavailable, err
		}
		return retryableConnError(err, true), protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, err)
	})
	return conn, err
}
