package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/tetherhq/tether/integration/clusterharness"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
)

// binDir holds the binaries under test: TETHER_BIN_DIR (make test builds them) or a fresh build.
var binDir string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	binDir = os.Getenv("TETHER_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "tether-bin-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-o", dir+"/", "../cmd/tether", "../cmd/tether-runner", "../cmd/tether-provider-local", "../cmd/tether-provider-docker", "../cmd/tether-provider-daytona")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build binaries: %v\n%s", err, out)
		}
		binDir = dir
	}
	return m.Run(), nil
}

func bin(name string) string { return filepath.Join(binDir, name) }

// controllerProc is a `tether serve` process.
type controllerProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	Data  string
	Addr  string // http://127.0.0.1:PORT
	Token string
	log   *syncBuffer
	// exited is closed once the process has been waited for.
	exited chan struct{}
}

type serveOpts struct {
	data      string   // reuse a data dir (restart)
	listen    string   // default 127.0.0.1:0
	extraArgs []string // e.g. --advertise-url, --ready-timeout
}

var listenLine = regexp.MustCompile(`tether controller on (http://\S+)`)

// startController starts `tether serve` and waits until it listens.
func startController(t *testing.T, o serveOpts) *controllerProc {
	t.Helper()
	if o.data == "" {
		o.data = t.TempDir()
	}
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	args := append([]string{"serve", "--data", o.data, "--listen", o.listen}, o.extraArgs...)
	cmd := exec.Command(bin("tether"), args...)
	log := &syncBuffer{}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start controller: %v", err)
	}
	c := &controllerProc{t: t, cmd: cmd, Data: o.data, log: log, exited: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			log.Write([]byte(line + "\n"))
			if m := listenLine.FindStringSubmatch(line); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
	}()
	go func() { _ = cmd.Wait(); pw.Close(); close(c.exited) }()
	select {
	case c.Addr = <-found:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("controller did not start; log:\n%s", log.String())
	}
	tok, err := os.ReadFile(filepath.Join(o.data, "operator.token"))
	if err != nil {
		t.Fatalf("operator token: %v", err)
	}
	c.Token = strings.TrimSpace(string(tok))
	t.Cleanup(func() {
		var runnerLogs []string
		if t.Failed() {
			runnerLogs = localRunnerLogs(o.data)
		}
		c.removeAll(t)
		c.Stop()
		killRunnersUnder(o.data)
		if t.Failed() {
			t.Logf("controller log:\n%s", log.String())
			for _, l := range runnerLogs {
				t.Log(l)
			}
		}
	})
	return c
}

// localRunnerLogs reads the logs of the runners the local provider started under data, read before
// the workspaces are removed with them.
func localRunnerLogs(data string) []string {
	paths, _ := filepath.Glob(filepath.Join(data, "providers", "local", "*", "runner.log"))
	var out []string
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			out = append(out, fmt.Sprintf("%s:\n%s", p, b))
		}
	}
	return out
}

// removeAll removes every workspace while the controller still runs: runners outlive their
// controller by design, so a test that only stopped the controller would leak them.
func (c *controllerProc) removeAll(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	var list []api.Workspace
	r := c.cli(t, nil, "workspace", "ls", "--json")
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &list) != nil {
		return
	}
	for _, ws := range list {
		c.cli(t, nil, "workspace", "rm", ws.ID)
	}
}

// killRunnersUnder kills runner processes whose working directory lies in dir: the backstop
// for a test that killed its controller or failed half-way.
func killRunnersUnder(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || !strings.HasPrefix(cwd, dir+"/") || !strings.Contains(cmdline(pid), "tether-runner") {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Stop stops the controller gracefully (idempotent).
func (c *controllerProc) Stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func (c *controllerProc) Client(t *testing.T) *client.Client {
	cl, err := client.New(c.Addr, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// result is one CLI invocation.
// result is what a CLI run printed and its exit status.
type result = clusterharness.Result

// cli runs the real tether CLI against c.
func (c *controllerProc) cli(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	cmd := c.cliCmd(args...)
	cmd.Stdin = stdin
	return clusterharness.Run(t, cmd)
}

func (c *controllerProc) cliCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(bin("tether"), args...)
	cmd.Env = append(os.Environ(), "TETHER_ADDR="+c.Addr, "TETHER_DATA="+c.Data, "TETHER_TOKEN=")
	return cmd
}

// mustCLI runs the CLI and fails the test unless it exits 0.
func (c *controllerProc) mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	r := c.cli(t, nil, args...)
	if r.Code != 0 {
		t.Fatalf("tether %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// createWorkspace creates a local workspace through the CLI and returns its record.
func (c *controllerProc) createWorkspace(t *testing.T, extra ...string) api.Workspace {
	t.Helper()
	out := c.mustCLI(t, append([]string{"workspace", "create", "--json"}, extra...)...)
	var ws api.Workspace
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("workspace create --json printed %q: %v", out, err)
	}
	if ws.State != api.StateReady || ws.ID == "" || ws.AllocationID == "" || ws.Provider != "local" {
		t.Fatalf("unexpected workspace %+v", ws)
	}
	return ws
}

func (c *controllerProc) showWorkspace(t *testing.T, id string) api.Workspace {
	t.Helper()
	var ws api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "show", id, "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	return ws
}

func (c *controllerProc) runs(t *testing.T, id string) []api.Run {
	t.Helper()
	var runs []api.Run
	if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "ls", id, "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	return runs
}

// allocationDir is where the local provider keeps an allocation (runner.pid, runner.log, root/).
func (c *controllerProc) allocationDir(ws api.Workspace) string {
	return filepath.Join(c.Data, "providers", "local", ws.AllocationID)
}

// runnerPID reads the pid the local provider recorded for the workspace's runner.
func (c *controllerProc) runnerPID(t *testing.T, ws api.Workspace) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.allocationDir(ws), "runner.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// eventually polls cond until it holds or the deadline passes. Deadlines are generous bounds on
// liveness, not timing assertions.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPID reads the pid a test command wrote. The shell creates the file before it writes the
// number, so a reader that only waited for the file to exist may see it empty: wait for the line.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var b []byte
	eventually(t, 20*time.Second, "a pid in "+path, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && bytes.HasSuffix(b, []byte("\n"))
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, p)
			}
		}
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// syncBuffer is a goroutine-safe buffer for process logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proxy is a TCP relay runners dial instead of the controller, so a test can cut their sockets.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) URL() string { return "http://" + p.l.Addr().String() }

func (p *proxy) setTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = strings.TrimPrefix(addr, "http://")
}

// cut closes every relayed connection: both ends see their socket die.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// giveToAgent hands everything a test wrote into a workspace from the host to the workspace's
// own user (the owner of its root): a confined runner acts on files with the agent's rights
// only, so files the test process (root) made would be beyond its reach, as they would be
// beyond the agent's.
func giveToAgent(t *testing.T, root string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Only what is not the agent's yet: a chown changes the ctime even when it changes nothing.
		var cur syscall.Stat_t
		if err := syscall.Lstat(p, &cur); err != nil || (cur.Uid == st.Uid && cur.Gid == st.Gid) {
			return err
		}
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hostPIDs lists the host pids of processes whose command line contains marker: a confined
// command's own $$ and $! are pids of its pid namespace, meaningless on the host.
func hostPIDs(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && strings.Contains(cmdline(pid), marker) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
