package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// Detached runs: exec --detach prints the run id; run logs reads the output (per stream, from an
// offset, following); run wait exits with the run's status; run show has the log's size; bad
// input is refused with the right codes.
func TestExecDetachLogsWaitAndBadInput(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)

	r := c.cli(t, nil, "exec", "--detach", ws.ID, "--", "sh", "-c", "echo one; echo two >&2; while [ ! -e go-on ]; do sleep 0.05; done; echo three; exit 5")
	runID := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || !strings.HasPrefix(runID, "run_") {
		t.Fatalf("exec --detach: %+v", r)
	}
	eventually(t, 20*time.Second, "the detached run's first output", func() bool {
		return c.cli(t, nil, "run", "logs", runID, "--stream", "stdout").Stdout == "one\n"
	})
	if r := c.cli(t, nil, "run", "logs", runID, "--stream", "stderr"); r.Code != 0 || r.Stdout != "" || r.Stderr != "two\n" {
		t.Fatalf("run logs --stream stderr: %+v", r)
	}
	follow := c.cliCmd("run", "logs", runID, "--follow", "--since-offset", "3", "--stream", "stdout")
	var followOut strings.Builder
	follow.Stdout = &followOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	wait := c.cliCmd("run", "wait", runID)
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	giveToAgent(t, ws.Root)
	if err := os.WriteFile(filepath.Join(ws.Root, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := follow.Wait(); err != nil || followOut.String() != "\nthree\n" {
		t.Fatalf("run logs --follow --since-offset 3: %v, %q", err, followOut.String())
	}
	if err := wait.Wait(); exitCode(err) != 5 {
		t.Fatalf("run wait: want exit 5, got %v", err)
	}
	var run api.Run
	if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "show", runID, "--json")), &run); err != nil {
		t.Fatal(err)
	}
	if run.State != api.RunExited || run.ExitCode == nil || *run.ExitCode != 5 {
		t.Fatalf("run show: %+v", run)
	}
	if run.Log != nil && (run.Log.StdoutEnd != int64(len("one\nthree\n")) || run.Log.StderrEnd != int64(len("two\n"))) {
		t.Fatalf("run show: log %+v", *run.Log)
	}
	// Attaching to a finished run prints its log and exits with its status.
	if r := c.cli(t, nil, "run", "attach", runID); r.Code != 5 || r.Stdout != "one\nthree\n" || r.Stderr != "two\n" {
		t.Fatalf("attach to a finished run: %+v", r)
	}

	for _, tc := range []struct {
		args []string
		code string
	}{
		{[]string{"run", "logs", "run_nosuchrun"}, "not_found"},
		{[]string{"run", "attach", "run_nosuchrun"}, "not_found"},
		{[]string{"run", "wait", "run_nosuchrun"}, "not_found"},
		{[]string{"run", "signal", "run_nosuchrun", "TERM"}, "not_found"},
		{[]string{"run", "signal", runID, "NOSUCHSIG"}, "invalid_argument"},
		{[]string{"run", "signal", runID, "TERM"}, "conflict"},
		{[]string{"run", "logs", runID, "--since-offset", "999999"}, "invalid_argument"},
		{[]string{"run", "logs", runID, "--stream", "stdin"}, "invalid_argument"},
		// Without a terminal, -t is refused (as docker exec -t is).
		{[]string{"exec", "-t", ws.ID, "--", "true"}, "invalid_argument"},
		{[]string{"exec", "--idempotency-key", "k", ws.ID, "--", "true"}, ""},
		{[]string{"exec", "--idempotency-key", "k", ws.ID, "--", "false"}, "conflict"},
	} {
		r := c.cli(t, nil, tc.args...)
		if tc.code == "" {
			if r.Code != 0 {
				t.Errorf("%v: %+v", tc.args, r)
			}
			continue
		}
		if r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: "+tc.code+": ") {
			t.Errorf("%v: want error %s, got %+v", tc.args, tc.code, r)
		}
	}

	// A signal by name reaches a running run's process group.
	r = c.cli(t, nil, "exec", "--detach", ws.ID, "--", "sh", "-c", "trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done")
	runID = strings.TrimSpace(r.Stdout)
	eventually(t, 20*time.Second, "the trap to be set", func() bool {
		return c.cli(t, nil, "run", "logs", runID).Stdout == "ready\n"
	})
	c.mustCLI(t, "run", "signal", runID, "sigterm")
	if r := c.cli(t, nil, "run", "wait", runID); r.Code != 9 {
		t.Fatalf("run wait after SIGTERM: %+v", r)
	}
	if r := c.cli(t, nil, "run", "logs", runID); r.Stdout != "ready\ngot-term\n" {
		t.Fatalf("logs after SIGTERM: %+v", r)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Twenty concurrent identical requests with one idempotency key start one process, and every
// one of them gets its output and status.
func TestExecIdempotencyKeyStartsOneProcess(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	args := []string{"exec", "--idempotency-key", "job-1", ws.ID, "--", "sh", "-c", "echo started >> starts; echo hello; sleep 1; exit 3"}
	var wg sync.WaitGroup
	results := make([]result, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.cli(t, nil, args...)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Code != 3 || r.Stdout != "hello\n" {
			t.Errorf("request %d: %+v", i, r)
		}
	}
	b, err := os.ReadFile(filepath.Join(ws.Root, "starts"))
	if err != nil || string(b) != "started\n" {
		t.Fatalf("the command started %d times (%v); want once", strings.Count(string(b), "started"), err)
	}
	if runs := c.runs(t, ws.ID); len(runs) != 1 || runs[0].IdempotencyKey != "job-1" {
		t.Fatalf("runs: %+v", runs)
	}
}

// kill -9 of the CLI during exec: the run completes; run attach shows all of it, the rest
// included; run wait exits with its status.
func TestExecClientKilledRunCompletes(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	cli := c.cliCmd("exec", ws.ID, "--", "sh", "-c", "echo before; while [ ! -e go-on ]; do sleep 0.05; done; echo after; exit 4")
	var out syncBuffer
	cli.Stdout = &out
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the command's first line", func() bool { return out.String() == "before\n" })
	if err := cli.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cli.Wait()
	runs := c.runs(t, ws.ID)
	if len(runs) != 1 || runs[0].State != api.RunRunning {
		t.Fatalf("after the client's kill: %+v", runs)
	}
	giveToAgent(t, ws.Root)
	if err := os.WriteFile(filepath.Join(ws.Root, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(t, nil, "run", "attach", runs[0].ID); r.Code != 4 || r.Stdout != "before\nafter\n" {
		t.Fatalf("run attach: %+v", r)
	}
	if r := c.cli(t, nil, "run", "attach", "--stdout-offset", "7", runs[0].ID); r.Code != 4 || r.Stdout != "after\n" {
		t.Fatalf("run attach --stdout-offset 7: %+v", r)
	}
	if r := c.cli(t, nil, "run", "wait", runs[0].ID); r.Code != 4 {
		t.Fatalf("run wait: %+v", r)
	}
}

var _ = fmt.Sprint
var _ = syscall.SIGKILL
