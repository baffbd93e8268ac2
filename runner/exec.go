package runner

import (
	"context"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/google/uuid"
	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
	"github.com/tetherhq/tether/sandbox/runlog"
)

// outputGrace is how long output is still collected after a command exits while something it
// left in the background holds its stdout or stderr (or its terminal) open.
const outputGrace = 2 * time.Second

// exec starts one command whose output goes to the run's log, never straight to the stream, and
// then serves the stream as an attach from offset 0 (or, detached, ends it after ChanStarted). A
// dropped stream never stops the command: only an explicit cancel, the timeout or a shutdown do.
func (r *Runner) exec(_ context.Context, st *yamux.Stream, args protocol.ExecArgs) {
	fail := func(err error) { refuseExec(st, err) }
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
	e, err := r.startRun(args)
	if err != nil {
		r.runs.release(args.RunID)
		fail(err)
		return
	}
	if args.Detach {
		_ = protocol.NewChannelWriter(st).WriteJSONFrame(protocol.ChanStarted, protocol.ExecStarted{PID: e.status.PID, RunID: args.RunID, TTY: e.tty})
		return
	}
	r.serveRun(st, args.RunID, e, [2]int64{}, args.Stdin)
}

// startRun starts a reserved run: its process, the pumps into its log and the routine that
// finishes it. Unless args.Detach, the calling stream is counted as attached.
func (r *Runner) startRun(args protocol.ExecArgs) (*runEntry, error) {
	dir, closeDir, err := r.resolveDir(args.Cwd)
	if err != nil {
		return nil, err
	}
	defer closeDir()
	log, err := r.logs.Create(protocol.StreamStdout, protocol.StreamStderr)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "run log: %v", err)
	}
	spec := process.Spec{
		Argv: args.Argv, Env: append(append([]string{}, r.cfg.Env...), args.Env...), Dir: dir,
		Timeout: time.Duration(args.Timeout), Confiner: r, WorkDir: args.Cwd,
	}
	var proc *process.Process
	var ctl *runControl
	var outputs []pumpSource
	if args.TTY != nil {
		proc, ctl, outputs, err = startTerminal(spec, *args.TTY)
	} else {
		proc, ctl, outputs, err = startPiped(spec, args.Stdin)
	}
	if err != nil {
		log.Remove()
		return nil, protocol.Errorf(protocol.CodeFailed, "start %q: %v", args.Argv[0], err)
	}
	r.runs.started(args.RunID, proc, log, ctl, args.TTY != nil, !args.Detach)
	e, err := r.runs.lookup(args.RunID)
	if err != nil {
		return nil, err // not reachable: a reserved run is never forgotten before it finished
	}
	var pumps sync.WaitGroup
	for _, o := range outputs {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			pump(o.f, log.Writer(o.stream))
		}()
	}
	finish := func(context.Context) { r.finishRun(args, proc, ctl, log, outputs, &pumps) }
	if !r.routines.Go("run "+args.RunID, finish) {
		proc.Cancel() // the runner is stopping
		go finish(context.Background())
	}
	return e, nil
}

// finishRun waits for the run's end and all its output, closes its log and records its exit;
// when no attached stream will send the exit, it is reported to the controller.
func (r *Runner) finishRun(args protocol.ExecArgs, proc *process.Process, ctl *runControl, log *runlog.Log, outputs []pumpSource, pumps *sync.WaitGroup) {
	exit, werr := proc.Wait(context.Background())
	ctl.closeStdin()
	pumpsDone := make(chan struct{})
	go func() { pumps.Wait(); close(pumpsDone) }()
	if r.pause(pumpsDone, outputGrace) {
		// Something the command left running still holds the pipes; stop collecting.
		for _, o := range outputs {
			o.f.Close()
		}
		<-pumpsDone
	}
	for _, o := range outputs {
		o.f.Close()
	}
	ctl.close()
	result := protocol.ExecExit{ExitCode: exit.Code, Signal: exit.Signal, TimedOut: exit.TimedOut, Canceled: exit.Canceled}
	if werr != nil {
		result.Error = protocol.AsError(werr)
	}
	if exit.TimedOut {
		result.Error = protocol.Errorf(protocol.CodeTimeout, "command exceeded its timeout of %s and was killed", time.Duration(args.Timeout))
	}
	// Closed before the exit is recorded: whoever sees the run finished finds all its output.
	log.Close()
	st, report := r.runs.exited(args.RunID, result)
	r.services.RunFinished(args.RunID)
	if report {
		// Nobody attached will send the exit; tell the controller on whatever connection is live.
		r.reportRunExit(st)
	}
}

// pumpSource is one descriptor the command's output is read from, and the log stream it goes to.
type pumpSource struct {
	f      *os.File
	stream string
}

// startPiped starts spec with pipes for its stdout and stderr, and for its stdin when asked
// (else /dev/null).
func startPiped(spec process.Spec, stdin bool) (*process.Process, *runControl, []pumpSource, error) {
	var toClose, ours []*os.File
	cleanup := func() {
		for _, f := range append(toClose, ours...) {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		return r, w, err
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	toClose, ours = append(toClose, outW), append(ours, outR)
	errR, errW, err := pipe()
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	toClose, ours = append(toClose, errW), append(ours, errR)
	spec.Stdout, spec.Stderr = outW, errW
	var stdinW *os.File
	if stdin {
		stdinR, w, err := pipe()
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		toClose, ours = append(toClose, stdinR), append(ours, w)
		spec.Stdin, stdinW = stdinR, w
	}
	proc, err := process.Start(spec)
	// The child holds its own copies now; ours would keep the pipes open forever.
	for _, f := range toClose {
		f.Close()
	}
	if err != nil {
		for _, f := range ours {
			f.Close()
		}
		return nil, nil, nil, err
	}
	ctl := &runControl{proc: proc}
	if stdinW != nil {
		ctl.stdin = stdinW
	}
	return proc, ctl, []pumpSource{{outR, protocol.StreamStdout}, {errR, protocol.StreamStderr}}, nil
}

// startTerminal starts spec on a new pseudo-terminal of the given size: its stdin, stdout and
// stderr, and its controlling terminal. Its output is the one stdout stream. Under namespaces
// isolation the terminal is the init's, which relays it to one of the sandbox's own devpts
// (sandbox/confine); everything here is the same.
func startTerminal(spec process.Spec, size protocol.WinSize) (*process.Process, *runControl, []pumpSource, error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: size.Rows, Cols: size.Cols}); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, nil, err
	}
	spec.Stdin, spec.Stdout, spec.Stderr, spec.Terminal = slave, slave, slave, true
	proc, err := process.Start(spec)
	slave.Close() // the command holds it now; the master reads EIO once it is gone everywhere
	if err != nil {
		master.Close()
		return nil, nil, nil, err
	}
	// The master's reads and writes are separate descriptors' work in the kernel; one file
	// serves both, so the pump's close after the grace also ends stdin and resizes.
	return proc, &runControl{proc: proc, stdin: master, tty: master}, []pumpSource{{master, protocol.StreamStdout}}, nil
}

// runControl is how streams attached to a run reach it: its stdin (or terminal), its terminal's
// size and its process group.
type runControl struct {
	proc *process.Process
	mu   sync.Mutex
	// stdin is the pipe to the command's stdin or the terminal's master; nil once closed or
	// when the command's stdin is /dev/null.
	stdin *os.File
	tty   *os.File // the terminal's master, nil without one
}

func (c *runControl) writeStdin(p []byte) {
	c.mu.Lock()
	w := c.stdin
	c.mu.Unlock()
	if w == nil {
		return
	}
	// Written outside the lock: a command that does not read blocks this stream's reader, not
	// a close (which unblocks the write).
	if _, err := w.Write(p); err != nil && c.tty == nil {
		c.closeStdin()
	}
}

// closeStdin gives the command EOF on a piped stdin. A terminal is not closed: EOF there is the
// terminal's own ^D, which the client sends as a byte.
func (c *runControl) closeStdin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin != nil && c.tty == nil {
		c.stdin.Close()
		c.stdin = nil
	}
}

// close releases the terminal once the run's output was collected.
func (c *runControl) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tty != nil {
		c.tty.Close()
	}
	if c.stdin != nil {
		c.stdin.Close()
	}
	c.stdin = nil
}

func (c *runControl) control(ec protocol.ExecControl) {
	switch {
	case ec.Cancel:
		c.proc.Cancel()
	case ec.Signal > 0:
		_ = c.proc.Signal(syscall.Signal(ec.Signal))
	}
	if ec.Resize != nil && c.tty != nil {
		// The kernel sends SIGWINCH to the terminal's foreground group.
		_ = pty.Setsize(c.tty, &pty.Winsize{Rows: ec.Resize.Rows, Cols: ec.Resize.Cols})
	}
}

// pump copies one output descriptor into the run's log until it ends (EOF, or EIO for a
// terminal whose last holder closed it) or is closed after the output grace. The log never
// blocks on a reader, so the command never blocks on (or dies of) a reader that went away.
func pump(f *os.File, w io.Writer) {
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			// A write the log could not keep is recorded there as dropped bytes.
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
