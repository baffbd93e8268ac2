package clusterharness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ControllerPort is the port every controller listens on, each on its own node's address.
const ControllerPort = 7420

// Controller is one `tether serve` running inside its node's namespace. Kill, Stop and Start
// restart it with the same data directory, address and flags.
type Controller struct {
	Name string // its server name behind the balancer
	Node *Node
	Data string // its data directory
	Addr string // host:port it listens on, inside its node

	args []string
	env  []string
	log  string // stdout and stderr of every run, appended

	mu     sync.Mutex
	runs   int
	cmd    *exec.Cmd     // the current run
	exited chan struct{} // closed once the current run has been waited for; nil before Start
}

// URL is the controller's own address, not the balancer's: for checks that must reach one
// controller in particular (the test's process reaches every node through the bridge).
func (c *Controller) URL() string { return "http://" + c.Addr }

// runMarker starts each run's part of the log.
const runMarker = "=== run "

var listenLine = regexp.MustCompile(`tether controller on http://\S+`)

// Start runs the controller and returns once it listens. It fails t if the controller is
// already running or exits before it listens.
func (c *Controller) Start(t testing.TB) {
	t.Helper()
	c.StartWith(t)
}

// StartWith is Start with more flags for this run only (a later flag overrides an earlier one
// of the same name: `--sweep-grace 0s`).
func (c *Controller) StartWith(t testing.TB, more ...string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running() {
		t.Fatalf("controller %s is already running", c.Name)
	}
	c.runs++
	logf, err := os.OpenFile(c.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, runMarker+"%d of %s at %s\n", c.runs, c.Name, time.Now().Format(time.RFC3339Nano))
	listening := make(chan struct{})
	cmd := c.Node.Command(bin("tether"), append(slices.Clone(c.args), more...)...)
	cmd.Env = c.env
	cmd.Stdout = logf
	cmd.Stderr = &lineWatch{w: logf, re: listenLine, found: listening}
	// The controller dies with the test process even when t's cleanup never runs (its
	// runners are killed with the node's namespace, by the cleanup or the next test's sweep).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start controller %s: %v", c.Name, err)
	}
	exited := make(chan struct{})
	c.cmd, c.exited = cmd, exited
	// The log stays open until Wait has copied the last of stderr into it.
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	select {
	case <-listening:
	case <-exited:
		t.Fatalf("controller %s exited before it listened; log:\n%s", c.Name, Tail(c.log, 16<<10))
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("controller %s did not listen within 60s; log:\n%s", c.Name, Tail(c.log, 16<<10))
	}
}

// running reports whether the current run has not exited (c.mu held).
func (c *Controller) running() bool {
	if c.exited == nil {
		return false
	}
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Running reports whether the controller process runs.
func (c *Controller) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running()
}

// Kill kills the controller with SIGKILL, as a crash would: nothing of its shutdown runs, and
// its runners live on (they reconnect through the balancer). It returns once the process is
// gone; killing a stopped controller does nothing.
func (c *Controller) Kill(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGKILL, 0)
}

// Stop stops the controller gracefully with SIGTERM and waits for it to exit; one that takes
// longer than a minute is killed and fails t.
func (c *Controller) Stop(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGTERM, time.Minute)
}

// Restart kills the controller (when it runs) and starts it again with the same data
// directory, address and flags.
func (c *Controller) Restart(t testing.TB) {
	t.Helper()
	c.Kill(t)
	c.Start(t)
}

func (c *Controller) signal(t testing.TB, sig syscall.Signal, within time.Duration) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running() {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	if within == 0 {
		<-c.exited
		return
	}
	select {
	case <-c.exited:
	case <-time.After(within):
		_ = c.cmd.Process.Kill()
		<-c.exited
		t.Errorf("controller %s did not stop within %s of %s; killed", c.Name, within, sig)
	}
}

// lineWatch passes writes through to w and closes found when a line matching re went by.
type lineWatch struct {
	w     *os.File
	re    *regexp.Regexp
	found chan struct{}
	buf   []byte
	done  bool
}

func (l *lineWatch) Write(p []byte) (int, error) {
	if !l.done {
		l.buf = append(l.buf, p...)
		for {
			i := bytes.IndexByte(l.buf, '\n')
			if i < 0 {
				break
			}
			if l.re.Match(l.buf[:i]) {
				l.done = true
				close(l.found)
				l.buf = nil
				break
			}
			l.buf = l.buf[i+1:]
		}
	}
	return l.w.Write(p)
}

// ID is the controller's id in the cluster (DATA/controller.id, written on its first start and
// kept across restarts): what the store names as a runner's owner.
func (c *Controller) ID(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Data, "controller.id"))
	if err != nil {
		t.Fatalf("controller %s's id: %v", c.Name, err)
	}
	return strings.TrimSpace(string(b))
}

// RunLog is what the controller's current run (its last, once it exited) has logged so far.
func (c *Controller) RunLog(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(c.log)
	if err != nil {
		t.Fatalf("controller %s's log: %v", c.Name, err)
	}
	s := string(b)
	if i := strings.LastIndex(s, runMarker); i >= 0 {
		s = s[i:]
	}
	return s
}

// LogPath is the file the controller's runs log to, one after another.
func (c *Controller) LogPath() string { return c.log }
