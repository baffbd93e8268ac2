package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// quiesceWriter appends a counter line to svc.log, fsynced, every few milliseconds while it
// listens on $PORT; on SIGTERM it writes "stopped N" (N its last counter) and exits.
const quiesceWriter = `
import os, signal, socket, sys, time
f = open("svc.log", "a")
stopping = False
def stop(*_):
    # Only a flag: writing from the handler could run inside line()'s own write (a reentrant
    # buffered write fails) or between "n += 1" and its line; the loop writes the last line.
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, stop)
def line(text):
    f.write(text + "\n")
    f.flush()
    os.fsync(f.fileno())
n = 1
line(str(n))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen() # ready (tcp) only once a counter line is in
while not stopping:
    time.sleep(0.003)
    if not stopping:
        n += 1
        line(str(n))
line("stopped %d" % n)
sys.exit(0)
`

// promises counts what a test checked and what held, for its summary line.
type promises struct {
	t           *testing.T
	tried, held int
}

func (p *promises) check(ok bool, format string, args ...any) {
	p.t.Helper()
	p.tried++
	if !ok {
		p.t.Errorf(format, args...)
		return
	}
	p.held++
}

// Close stops a service that keeps writing and a running exec before its last capture: after
// reopen, the service's own last line and the run's are in the tree.
func TestCloseQuiescesBeforeTheFinalSave(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "busy")
	p := &promises{t: t}
	check := p.check

	c.mustCLI(t, "service", "start", "busy", "writer", "--port", "auto", "--ready", "tcp", "--", "/usr/bin/python3", "-c", quiesceWriter)
	long := c.cliCmd("exec", "busy", "--", "sh", "-c",
		`trap 'echo stopped >> run.log; exit 0' TERM; echo started > started; while :; do echo tick >> run.log; sleep 0.01; done`)
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = long.Process.Kill(); _ = long.Wait() })
	eventually(t, 20*time.Second, "the run to start and the service to write 100 lines", func() bool {
		_, err := os.Stat(filepath.Join(ws.Root, "started"))
		b, _ := os.ReadFile(filepath.Join(ws.Root, "svc.log"))
		return err == nil && strings.Count(string(b), "\n") >= 100
	})

	var chk api.CloseCheck
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "busy", "--check", "--json")), &chk); err != nil {
		t.Fatal(err)
	}
	check(chk.ActiveRuns == 1 && chk.ActiveServices == 1 && !chk.Ready && chk.PendingChanges,
		"close --check with a run and a service going: %+v", chk)

	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "busy", "--cancel-runs", "--json")), &closed); err != nil {
		t.Fatal(err)
	}
	check(closed.Workspace.State == api.StateClosed && closed.Snapshot != nil, "close: %+v", closed)
	check(closed.StoppedRuns == 1 && closed.StoppedServices == 1, "close stopped %d run(s) and %d service(s), want 1 and 1", closed.StoppedRuns, closed.StoppedServices)
	_ = long.Wait()
	runs := c.runs(t, "busy")
	check(len(runs) == 1 && runs[0].State == api.RunExited && runs[0].ExitCode != nil && *runs[0].ExitCode == 0,
		"the run close stopped is recorded as exited through its TERM trap: %+v", runs)

	c.mustCLI(t, "workspace", "reopen", "busy")
	svcLog := strings.Split(strings.TrimSpace(c.mustCLI(t, "exec", "busy", "--", "tail", "-n", "2", "svc.log")), "\n")
	check(len(svcLog) == 2 && svcLog[1] == "stopped "+svcLog[0], "svc.log after reopen ends %q: want the service's own last line", svcLog)
	if len(svcLog) == 2 {
		n, _ := strconv.Atoi(svcLog[0])
		t.Logf("the service wrote %d counter lines through close; all kept", n)
	}
	runLog := strings.TrimSpace(c.mustCLI(t, "exec", "busy", "--", "tail", "-n", "1", "run.log"))
	check(runLog == "stopped", "run.log after reopen ends %q: want the run's own last line", runLog)
	t.Logf("close-quiesce: %d promises tried, %d held", p.tried, p.held)
}

// quiesceEscapee listens on $PORT, then leaves a child in a session of its own holding the
// socket (argv carries a marker to find it by): the service's process group can go while its
// port stays open, so its stop cannot be verified.
const quiesceEscapee = `
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen()
if os.fork() == 0:
    os.setsid()
    while True:
        c, _ = s.accept()
        c.close()
while True:
    time.sleep(1)
`

// A close that cannot stop a service keeps the sandbox and says why; once the cause is gone it
// closes. Only without isolation can a process leave its service's group (a confined service's
// processes all end with its pid namespace).
func TestCloseRefusesWhenItCannotQuiesce(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "stuck", "--provider-opt", "isolation=none")
	p := &promises{t: t}
	check := p.check
	const marker = "tether-quiesce-escapee"
	t.Cleanup(func() {
		for _, pid := range hostPIDs(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	var svc api.Service
	if err := json.Unmarshal([]byte(c.mustCLI(t, "service", "start", "stuck", "escapee", "--port", "auto", "--ready", "tcp", "--json", "--",
		"/usr/bin/python3", "-c", quiesceEscapee, marker)), &svc); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "exec", "stuck", "--", "sh", "-c", "echo unsaved > work")

	r := c.cli(t, nil, "workspace", "close", "stuck")
	check(r.Code == 18 && strings.Contains(r.Stderr, "did not stop") && strings.Contains(r.Stderr, "port "+strconv.Itoa(svc.Port)),
		"close with a service that cannot be stopped: exit %d, %s", r.Code, r.Stderr)
	got := c.showWorkspace(t, "stuck")
	check(got.State == api.StateReady && got.AllocationID == ws.AllocationID, "a refused close changed the workspace: %+v", got)
	_, err := os.Stat(filepath.Join(ws.Root, "work"))
	check(err == nil, "the sandbox went with a refused close: %v", err)
	// The gate is open again: the workspace takes new work.
	check(c.cli(t, nil, "exec", "stuck", "--", "true").Code == 0, "exec after a refused close")

	escaped := hostPIDs(marker)
	check(len(escaped) == 1, "the escaped process: pids %v", escaped)
	for _, pid := range escaped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	eventually(t, 10*time.Second, "the escaped process to die", func() bool { return len(hostPIDs(marker)) == 0 })
	r = c.cli(t, nil, "workspace", "close", "stuck")
	check(r.Code == 0, "close once the port is free: exit %d, %s", r.Code, r.Stderr)
	t.Logf("close-refuses: %d promises tried, %d held", p.tried, p.held)
}
