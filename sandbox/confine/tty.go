package confine

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// A TTY command under namespaces runs on a pseudo-terminal of the sandbox's own devpts, which the
// init relays to the terminal the runner gave it (the init's stdin, stdout and stderr, its
// controlling terminal). The runner's terminal is raw: the sandbox's terminal does the echo, the
// line discipline and the signals, so what the command sees (`tty`, /dev/pts/N, job control) is a
// terminal the sandbox can name.

// drainGrace bounds how long the init still relays the sandbox terminal's output once the command
// exited and the rest of the namespace was killed: a descriptor of the terminal passed to another
// sandbox's process would otherwise keep the run from ending.
const drainGrace = 2 * time.Second

// forwardedTTYSignals are what the init passes on to a TTY command's process group: the command
// has a session of its own there, so the runner's signal to the init's group no longer reaches it.
var forwardedTTYSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGTSTP}

// makeRaw puts the runner's side of a TTY run's terminal in raw mode before the init starts, so
// nothing typed early is echoed or cooked twice: no echo, no line discipline, no signals, no
// output processing. The sandbox's terminal does all of that.
func makeRaw(f *os.File) error {
	fd := int(f.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("terminal attributes: %w", err)
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return fmt.Errorf("raw terminal: %w", err)
	}
	return nil
}

// ttyRelay is the init's state for a TTY command, shared with its signal handler.
type ttyRelay struct {
	inner atomic.Pointer[os.File] // the sandbox terminal's master, once open
	pid   atomic.Int64            // the command's pid (its session and group), once started
	// sizeMu makes each copy of the size read and set the newest one: two copies interleaved
	// could leave an older size last.
	sizeMu sync.Mutex
}

// syncSize copies the runner's terminal's size to the sandbox's. The inner kernel signals the
// command only when the size changed, so a copy too many costs nothing.
func (r *ttyRelay) syncSize() error {
	m := r.inner.Load()
	if m == nil {
		return nil
	}
	r.sizeMu.Lock()
	defer r.sizeMu.Unlock()
	return pty.InheritSize(os.Stdin, m)
}

// relayInput copies the keystrokes to the sandbox terminal. The size is synced before each
// chunk: the runner sets a resize before it writes what follows it, but SIGWINCH reaches the init
// on its own path, so without this a key typed after a resize could reach the command first.
func (r *ttyRelay) relayInput(master *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			_ = r.syncSize()
			if _, werr := master.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// onSignal handles a signal the init caught in TTY mode: a resize of the runner's terminal is
// copied to the sandbox's (whose kernel then sends SIGWINCH to the command's foreground group);
// anything else goes to the command's process group.
func (r *ttyRelay) onSignal(sig os.Signal) {
	if sig == syscall.SIGWINCH {
		_ = r.syncSize()
		return
	}
	if pid := r.pid.Load(); pid > 0 {
		_ = unix.Kill(-int(pid), sig.(syscall.Signal))
	}
}

// openTerminal allocates the sandbox terminal, after the root was built: /dev/ptmx there is the
// sandbox's own devpts instance (pts/ptmx), the only one its root can reach. The terminal starts
// at the runner's terminal's size, and its slave belongs to the agent, so that the command may
// reopen it by name. The command gets the slave as stdio and controlling terminal.
func (r *ttyRelay) openTerminal(cmd *exec.Cmd, spec initSpec) (slave *os.File, err error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal in the sandbox: %w", err)
	}
	if err := slave.Chown(spec.HostUID, spec.HostGID); err != nil {
		master.Close()
		slave.Close()
		return nil, fmt.Errorf("give the terminal to the agent: %w", err)
	}
	// Stored before the first copy: a resize from here on is copied again by the handler.
	r.inner.Store(master)
	if err := r.syncSize(); err != nil {
		master.Close()
		slave.Close()
		return nil, fmt.Errorf("terminal size: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Ctty is the command's descriptor 0; a session leader needs no process group of its own.
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	return slave, nil
}

// run starts the command on the sandbox terminal and relays it until the command exited and its
// output was drained. What the command left running is killed first: it would die with the init
// anyway, and while it holds the terminal the output never ends.
func (r *ttyRelay) run(cmd *exec.Cmd, slave *os.File) (initStatus, error) {
	master := r.inner.Load()
	err := cmd.Start()
	slave.Close() // the command holds it now; the master reads EIO once it is gone everywhere
	if err != nil {
		return initStatus{}, err
	}
	r.pid.Store(int64(cmd.Process.Pid))
	go r.relayInput(master) // ends with the init
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		copyOut(os.Stdout, master)
	}()
	st := reap(cmd.Process.Pid)
	// From pid 1, -1 is every other process of the namespace.
	_ = unix.Kill(-1, unix.SIGKILL)
	select {
	case <-drained:
	case <-time.After(drainGrace):
	}
	return st, nil
}

// copyOut copies the sandbox terminal's output to the runner's until the terminal's last holder
// closed it (EIO, after all it held was read).
func copyOut(w io.Writer, master *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := master.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
