package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/runlog"
	"golang.org/x/sys/unix"
)

// logStreams are a run's output streams, in the order their offsets travel.
var logStreams = [2]string{protocol.StreamStdout, protocol.StreamStderr}

func streamChannel(name string) protocol.Channel {
	if name == protocol.StreamStderr {
		return protocol.ChanStderr
	}
	return protocol.ChanStdout
}

// runAttach reconnects a stream to a run: see serveRun.
func (r *Runner) runAttach(_ context.Context, st *yamux.Stream, args protocol.RunAttachArgs) {
	e, err := r.runs.attach(args.RunID)
	if err != nil {
		refuseExec(st, err)
		return
	}
	r.serveRun(st, args.RunID, e, [2]int64{args.StdoutOffset, args.StderrOffset}, args.Stdin)
}

// serveRun serves one stream attached to a run (counted by runTable.attach or started): it
// sends ChanStarted, then the run's log from offs on, following; forwards the stream's stdin
// (when stdin) and control frames to the run; and ends with ChanExit once the run ended and all
// its output was sent. A stream that fails leaves the run running.
func (r *Runner) serveRun(st *yamux.Stream, id string, e *runEntry, offs [2]int64, stdin bool) {
	delivered := false
	defer func() {
		if status, report := r.runs.leave(id, delivered); report {
			r.reportRunExit(status)
		}
	}()
	cw := protocol.NewChannelWriter(st)
	if err := checkOffsets(e.log, logStreams[:], offs[:]); err != nil {
		refuseExec(st, err)
		return
	}
	if err := cw.WriteJSONFrame(protocol.ChanStarted, protocol.ExecStarted{PID: e.status.PID, RunID: id, TTY: e.tty}); err != nil {
		return
	}
	go readControl(st, e.ctl, stdin)
	// The stream's reader may be gone without this side knowing until a write fails: the next
	// output or the run's end finds out, and the run's exit is then reported instead.
	if _, closed, err := sendLog(cw, e.log, logStreams[:], offs[:], true, nil); err != nil || !closed {
		return
	}
	<-e.ended
	exit := r.runs.status(id).Exit
	delivered = cw.WriteJSONFrame(protocol.ChanExit, exit) == nil
}

// readControl forwards stdin (when asked) and acts on control frames until the stream ends. A
// stream that ends leaves the command's stdin open: a reattach may go on writing to it.
func readControl(st *yamux.Stream, ctl *runControl, stdin bool) {
	buf := make([]byte, 64<<10)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			return
		}
		switch ch {
		case protocol.ChanStdin:
			if !stdin {
				continue
			}
			if len(p) == 0 {
				ctl.closeStdin()
				continue
			}
			ctl.writeStdin(p)
		case protocol.ChanControl:
			var c protocol.ExecControl
			if json.Unmarshal(p, &c) == nil {
				ctl.control(c)
			}
		}
	}
}

// checkOffsets refuses offsets past what a stream ever held.
func checkOffsets(l *runlog.Log, names []string, offs []int64) error {
	for i, name := range names {
		if _, end := l.Bounds(name); offs[i] < 0 || offs[i] > end {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%s offset %d is past the %d bytes written", name, offs[i], end)
		}
	}
	return nil
}

var errStopped = errors.New("reader went away")

// sendLog sends the named streams of l from offs (updated as bytes go out): data frames, each
// stream's contiguous from its offset, and a ChanGap frame wherever bytes are no longer held.
// It returns when everything held was sent and, with follow, the log is closed (closed true),
// or when stop closes.
func sendLog(cw *protocol.ChannelWriter, l *runlog.Log, names []string, offs []int64, follow bool, stop <-chan struct{}) (_ []int64, closed bool, _ error) {
	buf := make([]byte, 256<<10)
	for {
		// Taken before reading: an append after any read below closes it.
		wait := l.Changed()
		progressed, allClosed := false, true
		for i, name := range names {
			res, err := l.Read(name, offs[i], buf)
			if err != nil {
				return offs, false, err
			}
			switch {
			case res.Gap != nil:
				if err := cw.WriteJSONFrame(protocol.ChanGap, protocol.LogGap{Stream: name, From: res.Gap.From, To: res.Gap.To}); err != nil {
					return offs, false, err
				}
				offs[i], progressed = res.Gap.To, true
			case res.N > 0:
				if err := cw.WriteFrame(streamChannel(name), buf[:res.N]); err != nil {
					return offs, false, err
				}
				offs[i] += int64(res.N)
				progressed = true
			case !res.Closed:
				allClosed = false
			}
		}
		if progressed {
			continue
		}
		if allClosed || !follow {
			return offs, allClosed, nil
		}
		select {
		case <-wait:
		case <-stop:
			return offs, false, errStopped
		}
	}
}

// runLogs answers with the run's log per the contract: data and gap frames, ChanLogEnd last. It
// is refused (unknown run, bad stream or offset) with one ChanError frame carrying the error.
func (r *Runner) runLogs(ctx context.Context, st *yamux.Stream, args protocol.RunLogsArgs) {
	cw := protocol.NewChannelWriter(st)
	e, err := r.runs.lookup(args.RunID)
	if err != nil {
		refuseLogs(st, err)
		return
	}
	names, offs := logStreams[:], []int64{args.StdoutOffset, args.StderrOffset}
	switch args.Stream {
	case "":
	case protocol.StreamStdout:
		names, offs = names[:1], offs[:1]
	case protocol.StreamStderr:
		names, offs = names[1:], offs[1:]
	default:
		refuseLogs(st, protocol.Errorf(protocol.CodeInvalidArgument, "stream %q: want %q, %q or none", args.Stream, protocol.StreamStdout, protocol.StreamStderr))
		return
	}
	if err := checkOffsets(e.log, names, offs); err != nil {
		refuseLogs(st, err)
		return
	}
	stop := make(chan struct{})
	go func() {
		// The controller closes its side when its reader went away: stop following then.
		_, _ = io.Copy(io.Discard, st)
		close(stop)
	}()
	closed := false
	if args.NoOutput {
		closed, err = waitClosed(e.log, args.Follow, stop)
	} else {
		_, closed, err = sendLog(cw, e.log, names, offs, args.Follow, stop)
	}
	if err != nil {
		return
	}
	end := protocol.LogEnd{Finished: closed}
	for i, name := range names {
		if name == protocol.StreamStdout {
			end.StdoutOffset = offs[i]
		} else {
			end.StderrOffset = offs[i]
		}
	}
	if args.Stream == protocol.StreamStdout {
		end.StderrOffset = args.StderrOffset
	} else if args.Stream == protocol.StreamStderr {
		end.StdoutOffset = args.StdoutOffset
	}
	if closed {
		// The log closes just before the exit is recorded.
		select {
		case <-e.ended:
		case <-ctx.Done():
			return
		}
		exit := r.runs.status(args.RunID).Exit
		end.Exit = &exit
	}
	end.Output = r.runs.status(args.RunID).Output
	_ = cw.WriteJSONFrame(protocol.ChanLogEnd, end)
}

// waitClosed waits (with follow) for the log to close, sending nothing.
func waitClosed(l *runlog.Log, follow bool, stop <-chan struct{}) (bool, error) {
	for {
		wait := l.Changed()
		if l.Closed() {
			return true, nil
		}
		if !follow {
			return false, nil
		}
		select {
		case <-wait:
		case <-stop:
			return false, errStopped
		}
	}
}

// refuseLogs answers a refused run_logs: one ChanError frame.
func refuseLogs(w io.Writer, err error) {
	_ = protocol.NewChannelWriter(w).WriteJSONFrame(protocol.ChanError, protocol.AsError(err))
}

// runSignal delivers a signal to a running run's process group.
func (r *Runner) runSignal(_ context.Context, _ *yamux.Stream, args protocol.RunSignalArgs) (protocol.RunStatus, error) {
	// The kernel's signals are 1 to 64 (_NSIG); 0 only probes, which is no delivery.
	if args.Signal < 1 || args.Signal > 64 {
		return protocol.RunStatus{}, protocol.Errorf(protocol.CodeInvalidArgument, "signal %d does not exist", args.Signal)
	}
	return r.runs.signal(args.RunID, unix.Signal(args.Signal))
}
