// Package process runs commands for a workspace: each in its own process group, so a timeout, a
// cancel or a stop reaches everything the command started, not just its first process.
package process

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Spec describes one command.
type Spec struct {
	Argv []string
	Env  []string // complete environment
	Dir  string
	// ExtraFiles are passed to the child (Dir may name one of them as /proc/self/fd/N).
	ExtraFiles []*os.File
	Stdin      io.Reader // nil: /dev/null
	Stdout     io.Writer
	Stderr     io.Writer
	Timeout    time.Duration // 0: none
	// OutputGrace bounds how long output is still collected after the command exits while
	// something it left behind keeps the pipes open.
	OutputGrace time.Duration
	// Confiner, when set, isolates the command from whoever starts it (see sandbox/confine).
	Confiner Confiner
	// WorkDir is Dir as a workspace-relative path, for a Confiner that shows the command the
	// workspace somewhere else.
	WorkDir string
	// Terminal says Stdin is a terminal (the slave of a pseudo-terminal, also Stdout and
	// Stderr): the command gets a session of its own with it as its controlling terminal, so
	// the terminal's signals (^C, SIGWINCH) reach its foreground group. The session's id is the
	// command's pid, as its process group's is without a terminal. A Confiner sees it as
	// SysProcAttr.Setctty (sandbox/confine then relays it to a terminal of the sandbox's own).
	Terminal bool
}

// A Confiner changes how a command is started so that it runs apart from its starter: as
// another user, or inside namespaces of its own. Confine may rewrite cmd (its path, arguments,
// environment and SysProcAttr) before it starts.
type Confiner interface {
	Confine(cmd *exec.Cmd, workDir string) (Confined, error)
}

// Confined is what a Confiner needs around the confined command's life.
type Confined struct {
	// Started runs once the command started (or failed to): the starter's copies of descriptors
	// it handed the child are closed there.
	Started func()
	// Exit turns the wrapper's exit into the command's own; an error is a failure of the
	// confinement itself (the command never ran). It is called exactly once, also after a
	// failed start, so it is where the confinement releases what it holds.
	Exit func(Exit) (Exit, error)
}

// Exit is how a command ended.
type Exit struct {
	Code     int // -1 when killed by a signal
	Signal   int
	TimedOut bool
	Canceled bool
}

// Process is a started command.
type Process struct {
	cmd        *exec.Cmd
	done       chan struct{}
	exit       Exit
	err        error
	timedOut   chan struct{}
	canceled   chan struct{}
	cancelOnce sync.Once
}

// Start starts spec. The process outlives ctx only in the sense that ctx is not used to stop it:
// callers stop it explicitly with Kill, so a dropped connection never kills work by accident.
func Start(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("empty command")
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.Stdin = spec.Stdin
	cmd.Stdout = spec.Stdout
	cmd.Stderr = spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.Terminal {
		if _, ok := spec.Stdin.(*os.File); !ok {
			return nil, errors.New("a terminal command needs its terminal as stdin")
		}
		// A session leader may not change its process group (setpgid fails), and needs none:
		// setsid made its group too. Ctty is the child's descriptor 0, the terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	cmd.WaitDelay = spec.OutputGrace
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	confined := Confined{Started: func() {}, Exit: func(e Exit) (Exit, error) { return e, nil }}
	if spec.Confiner != nil {
		c, err := spec.Confiner.Confine(cmd, spec.WorkDir)
		if err != nil {
			return nil, err
		}
		confined = c
	}
	err := cmd.Start()
	confined.Started()
	if err != nil {
		_, _ = confined.Exit(Exit{Code: -1}) // releases what the confinement holds
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), timedOut: make(chan struct{}), canceled: make(chan struct{})}
	stopTimer := func() bool { return true }
	if spec.Timeout > 0 {
		t := time.AfterFunc(spec.Timeout, func() {
			close(p.timedOut)
			p.killGroup()
		})
		stopTimer = t.Stop
	}
	go func() {
		err := cmd.Wait()
		stopTimer()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
			p.err = err
		}
		exit, cerr := confined.Exit(exitOf(cmd.ProcessState))
		if cerr != nil && p.err == nil {
			p.err = cerr
		}
		p.exit = exit
		p.exit.TimedOut = isClosed(p.timedOut)
		p.exit.Canceled = isClosed(p.canceled)
		close(p.done)
	}()
	return p, nil
}

// PID is the process id, which is also its process group id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and its output is collected.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the exit. ctx only bounds the waiting.
func (p *Process) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-p.done:
		return p.exit, p.err
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// Cancel kills the whole process group and records that it was canceled.
func (p *Process) Cancel() {
	p.cancelOnce.Do(func() { close(p.canceled) })
	p.killGroup()
}

// Signal delivers sig to the whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *Process) killGroup() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

func exitOf(ps *os.ProcessState) Exit {
	if ps == nil {
		return Exit{Code: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: int(ws.Signal())}
	}
	return Exit{Code: ps.ExitCode()}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
