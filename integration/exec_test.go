package integration

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func TestExecStatusStreamsAndRecords(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "basics")

	// Exit statuses pass through; stdout and stderr stay separate.
	r := c.cli(t, nil, "exec", ws.ID, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.Code != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Fatalf("exit 3 case: %+v", r)
	}
	// The workspace is addressable by name; stdin is wired through.
	r = c.cli(t, strings.NewReader("line one\nline two\n"), "exec", "basics", "--", "sh", "-c", "tr a-z A-Z")
	if r.Code != 0 || r.Stdout != "LINE ONE\nLINE TWO\n" {
		t.Fatalf("stdin case: %+v", r)
	}
	// Killed by a signal: 128+N, like a shell.
	r = c.cli(t, nil, "exec", ws.ID, "--", "sh", "-c", "kill -TERM $$")
	if r.Code != 128+int(syscall.SIGTERM) {
		t.Fatalf("signal case: %+v", r)
	}
	// --env and --cwd (relative to the root); commands never see the runner's token.
	if err := os.MkdirAll(filepath.Join(ws.Root, "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	giveToAgent(t, ws.Root)
	r = c.cli(t, nil, "exec", ws.ID, "--cwd", "sub/dir", "-e", "GREETING=hi there", "--", "sh", "-c",
		`echo "$GREETING"; pwd; env | grep -c TETHER_RUNNER_TOKEN || true`)
	// The confined command sees its workspace at /workspace, not where the host keeps it.
	want := "hi there\n/workspace/sub/dir\n0\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("env/cwd case: got %+v, want stdout %q", r, want)
	}
	// A command that cannot start is a typed error, not a hang.
	r = c.cli(t, nil, "exec", ws.ID, "--", "no-such-command-xyz")
	if r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: failed: ") {
		t.Fatalf("missing command: %+v", r)
	}

	runs := c.runs(t, ws.ID)
	if len(runs) != 5 {
		t.Fatalf("want 5 runs, got %d: %+v", len(runs), runs)
	}
	for _, run := range runs {
		if run.WorkspaceID != ws.ID || run.AllocationID != ws.AllocationID || run.FinishedAt == nil {
			t.Fatalf("run not bound or not finished: %+v", run)
		}
	}
	if runs[0].State != api.RunExited || runs[0].ExitCode == nil || *runs[0].ExitCode != 3 {
		t.Fatalf("first run: %+v", runs[0])
	}
	if runs[2].Signal != int(syscall.SIGTERM) || runs[2].ExitCode != nil {
		t.Fatalf("signal run: %+v", runs[2])
	}
	if runs[4].State != api.RunFailed {
		t.Fatalf("unstartable run: %+v", runs[4])
	}
}

func TestExecCwdCannotEscape(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws.Root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cwd, code string
	}{
		{"..", "path_escape"},
		{"../..", "path_escape"},
		{"/etc", "path_escape"},
		{"a/../../x", "path_escape"},
		{"link", "symlink_refused"},
		{"link/", "invalid_path"},
		{"a//b", "invalid_path"},
		{"missing", "not_found"},
	} {
		r := c.cli(t, nil, "exec", ws.ID, "--cwd", tc.cwd, "--", "sh", "-c", "touch escaped")
		if r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: "+tc.code+": ") {
			t.Errorf("--cwd %q: want error %s, got %+v", tc.cwd, tc.code, r)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
		t.Fatal("a command ran outside the workspace")
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	marker := fmt.Sprintf("%d", 300000+os.Getpid()%1000)
	r := c.cli(t, nil, "exec", ws.ID, "--timeout", "1s", "--", "sh", "-c", "sleep "+marker+" & echo started > bg.started; sleep "+marker)
	if r.Code != 124 || !strings.HasPrefix(r.Stderr, "error: timeout: ") {
		t.Fatalf("timeout: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws.Root, "bg.started")); err != nil {
		t.Fatalf("the background child never started: %v", err)
	}
	eventually(t, 10*time.Second, "the background child to die with its group", func() bool { return len(hostPIDs("sleep "+marker)) == 0 })
	runs := c.runs(t, ws.ID)
	if len(runs) != 1 || runs[0].Signal != int(syscall.SIGKILL) || !strings.Contains(runs[0].Error, "timeout") {
		t.Fatalf("timed-out run record: %+v", runs)
	}
}

func TestExecCancelKillsProcessGroup(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	marker := fmt.Sprintf("%d", 310000+os.Getpid()%1000)
	cmd := c.cliCmd("exec", ws.ID, "--", "sh", "-c", "sleep "+marker+" & echo $$ > fg.pid; sleep "+marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(ws.Root, "fg.pid"))
		return err == nil
	})
	eventually(t, 10*time.Second, "both sleeps to run", func() bool { return len(hostPIDs("sleep "+marker)) >= 2 })
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("interrupted CLI: want exit 130, got %v", err)
	}
	eventually(t, 10*time.Second, "the command and its background child to die", func() bool { return len(hostPIDs("sleep "+marker)) == 0 })
	eventually(t, 10*time.Second, "the run to be recorded as killed", func() bool {
		runs := c.runs(t, ws.ID)
		return len(runs) == 1 && runs[0].State == api.RunExited && runs[0].Signal == int(syscall.SIGKILL)
	})
}

// 50 MiB on stdout and the same on stderr, concurrently: every byte arrives, in order.
func TestExecLargeOutputIntact(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	data := make([]byte, 50<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Root, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	cmd := c.cliCmd("exec", ws.ID, "--", "sh", "-c", "cat big & cat big >&2; wait")
	outPipe, _ := cmd.StdoutPipe()
	errPipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type sum struct {
		n   int64
		sum string
	}
	hashOf := func(r io.Reader, ch chan<- sum) {
		h := sha256.New()
		n, _ := io.Copy(h, r)
		ch <- sum{n, hex.EncodeToString(h.Sum(nil))}
	}
	outc, errc := make(chan sum, 1), make(chan sum, 1)
	go hashOf(outPipe, outc)
	go hashOf(errPipe, errc)
	out, errs := <-outc, <-errc
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec: %v", err)
	}
	for name, got := range map[string]sum{"stdout": out, "stderr": errs} {
		if got.n != int64(len(data)) || got.sum != hex.EncodeToString(want[:]) {
			t.Errorf("%s: %d bytes sha256 %s, want %d bytes sha256 %x", name, got.n, got.sum, len(data), want)
		}
	}
}
