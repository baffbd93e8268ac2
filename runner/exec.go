package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
)

// outputGrace is how long output is still forwarded after a command exits while something it
// left in the background holds its stdout or stderr open.
const outputGrace = 2 * time.Second

// exec runs one command and streams its stdio as tagged frames. A dropped stream detaches the
// command instead of killing it: only an explicit cancel, the timeout or a shutdown kill it.
func (r *Runner) exec(_ context.Context, st *yamux.Stream, args protocol.ExecArgs) {
	cw := protocol.NewChannelWriter(st)
	fail := func(err error) {
		_ = cw.WriteJSONFrame(protocol.ChanExit, protocol.ExecExit{ExitCode: -1, Error: protocol.AsError(err)})
	}
	if len(args.Argv) == 0 || args.Argv[0] == "" {
		fail(protocol.Errorf(protocol.CodeInvalidArgument, "exec needs a command"))
		return
	}
	if args.RunID == "" {
		args.RunID = uuid.NewString()
	}
	if err := r.runs.reserve(args.RunID); err != nil {
		fail(err)
		return
	}
	dir, closeDir, err := r.resolveDir(args.Cwd)
	if err != nil {
		r.runs.release(args.RunID)
		fail(err)
		return
	}
	defer closeDir()

	var detached atomic.Bool
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		r.runs.release(args.RunID)
		fail(err)
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		r.runs.release(args.RunID)
		fail(err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{stdinR, stdinW, outR, outW} {
			f.Close()
		}
		r.runs.release(args.RunID)
		fail(err)
		return
	}
	spec := process.Spec{
		Argv: args.Argv, Env: append(append([]string{}, r.cfg.Env...), args.Env...), Dir: dir,
		Stdin: stdinR, Stdout: outW, Stderr: errW, Timeout: time.Duration(args.Timeout),
		Confiner: r, WorkDir: args.Cwd,
	}
	if !args.Stdin {
		stdinW.Close()
		stdinW = nil
	}
	proc, err := process.Start(spec)
	// The child holds its own copies now; ours would keep the pipes open forever.
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		r.runs.release(args.RunID)
		fail(protocol.Errorf(protocol.CodeFailed, "start %q: %v", args.Argv[0], err))
		return
	}
	r.runs.started(args.RunID, proc)
	if err := cw.WriteJSONFrame(protocol.ChanStarted, protocol.ExecStarted{PID: proc.PID()}); err != nil {
		detached.Store(true)
	}

	var stdinMu sync.Mutex
	closeStdin := func() {
		stdinMu.Lock()
		defer stdinMu.Unlock()
		if stdinW != nil {
			stdinW.Close()
			stdinW = nil
		}
	}
	go r.readControl(st, proc, &stdinMu, &stdinW, closeStdin)

	var pumps sync.WaitGroup
	for _, p := range []struct {
		f  *os.File
		ch protocol.Channel
	}{{outR, protocol.ChanStdout}, {errR, protocol.ChanStderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			pump(p.f, cw, p.ch, &detached)
		}()
	}
	exit, werr := proc.Wait(context.Background())
	closeStdin()
	pumpsDone := make(chan struct{})
	go func() { pumps.Wait(); close(pumpsDone) }()
	if r.pause(pumpsDone, outputGrace) {
		// Something the command left running still holds the pipes; stop forwarding.
		outR.Close()
		errR.Close()
		<-pumpsDone
	}
	outR.Close()
	errR.Close()

	result := protocol.ExecExit{ExitCode: exit.Code, Signal: exit.Signal, TimedOut: exit.TimedOut, Canceled: exit.Canceled}
	if werr != nil {
		result.Error = protocol.AsError(werr)
	}
	if exit.TimedOut {
		result.Error = protocol.Errorf(protocol.CodeTimeout, "command exceeded its timeout of %s and was killed", time.Duration(args.Timeout))
	}
	r.runs.exited(args.RunID, result)
	r.services.RunFinished(args.RunID)
	if !detached.Load() && cw.WriteJSONFrame(protocol.ChanExit, result) == nil {
		return
	}
	// Whoever started the run is gone; tell the controller on whatever connection is live now.
	r.reportRunExit(protocol.RunStatus{RunID: args.RunID, Finished: true, Exit: result})
}

// readControl forwards stdin and acts on control frames until the stream ends.
func (r *Runner) readControl(st *yamux.Stream, proc *process.Process, mu *sync.Mutex, stdinW **os.File, closeStdin func()) {
	defer closeStdin()
	buf := make([]byte, 64<<10)
	for {
		ch, p, err := protocol.ReadFrame(st, buf)
		if err != nil {
			return // stream gone: the command keeps running, detached
		}
		switch ch {
		case protocol.ChanStdin:
			if len(p) == 0 {
				closeStdin()
				continue
			}
			mu.Lock()
			w := *stdinW
			mu.Unlock()
			if w != nil {
				if _, err := w.Write(p); err != nil {
					closeStdin()
				}
			}
		case protocol.ChanControl:
			var c protocol.ExecControl
			if json.Unmarshal(p, &c) != nil {
				continue
			}
			if c.Cancel {
				proc.Cancel()
			} else if c.Signal > 0 {
				_ = proc.Signal(syscall.Signal(c.Signal))
			}
		}
	}
}

// pump copies one output pipe to its channel. When the stream fails it keeps draining the pipe so
// the command never blocks on (or dies of) a write to a reader that went away.
func pump(f *os.File, cw *protocol.ChannelWriter, ch protocol.Channel, detached *atomic.Bool) {
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 && !detached.Load() {
			if werr := cw.WriteFrame(ch, buf[:n]); werr != nil {
				detached.Store(true)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				detached.Store(true)
			}
			return
		}
	}
}
