package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/creack/pty"
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

// tether exec -it under a real pseudo-terminal: the command gets a terminal of the local one's
// size, which follows a resize; ^C reaches the command; the exit status passes through.
func TestExecInteractiveTerminal(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t) // confined (namespaces): the terminal is the sandbox's own
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	cmd := c.cliCmd("exec", "-it", ws.ID, "--", "sh")
	cmd.Env = append(cmd.Env, "TERM=xterm", "PS1=$ ")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var out syncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("terminal output:\n%q", out.String())
		}
	}()
	go func() { _, _ = io.Copy(&out, ptmx) }()
	typeLine := func(s string) {
		if _, err := ptmx.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(re string) func() bool {
		rx := regexp.MustCompile(re)
		return func() bool { return rx.MatchString(out.String()) }
	}
	typeLine("tty\n")
	eventually(t, 20*time.Second, "tty to print a terminal device", seen(`/dev/pts/\d+\r\n`))
	typeLine("stty size; echo TERM=$TERM\n")
	eventually(t, 10*time.Second, "stty size to say 30 100", seen(`30 100\r\nTERM=xterm\r\n`))
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// The resize travels as SIGWINCH to the CLI, then a frame: ask until it arrived.
	eventually(t, 10*time.Second, "stty size to follow the resize", func() bool {
		if seen(`40 120\r\n`)() {
			return true
		}
		typeLine("stty size\n")
		return false
	})
	marker := fmt.Sprintf("sleep %d", 320000+os.Getpid()%1000)
	typeLine(marker + "; echo not-interrupted\n")
	eventually(t, 10*time.Second, "the sleep to run", func() bool { return len(hostPIDs(marker)) > 0 })
	typeLine("\x03")
	eventually(t, 10*time.Second, "^C to end the sleep", func() bool { return len(hostPIDs(marker)) == 0 })
	typeLine("echo rc=$?\n")
	eventually(t, 10*time.Second, "the interrupted status", seen(`rc=130\r\n`))
	typeLine("exit 3\n")
	if err := cmd.Wait(); exitCode(err) != 3 {
		t.Fatalf("exec -it: want exit 3, got %v; output:\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "not-interrupted") && !strings.Contains(out.String(), "echo not-interrupted") {
		t.Fatalf("the sleep was not interrupted:\n%s", out.String())
	}
}

// A run writes 50 MiB of numbered lines in five steps while the runner's socket is cut three
// times and the controller is SIGKILLed and restarted once: the exec that follows it and
// `run logs` both reproduce every line once, in order, and --since-offset resumes exactly.
func TestRunOutputSurvivesCutsAndControllerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MiB through cuts and a restart")
	}
	p := startProxy(t)
	data := t.TempDir()
	c := startController(t, serveOpts{data: data, extraArgs: []string{"--advertise-url", p.URL()}})
	p.setTarget(c.Addr)
	ws := c.createWorkspace(t)

	const steps, perStep = 5, 1400000
	var want []byte
	var stepEnd [steps]int
	for i := 1; i <= steps*perStep; i++ {
		want = strconv.AppendInt(want, int64(i), 10)
		want = append(want, '\n')
		if i%perStep == 0 {
			stepEnd[i/perStep-1] = len(want)
		}
	}
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do seq $((i*%d+1)) $(((i+1)*%d)); while [ ! -e step-$i ]; do sleep 0.05; done; i=$((i+1)); done`, steps, perStep, perStep)
	outPath := filepath.Join(t.TempDir(), "exec.out")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	execCmd := c.cliCmd("exec", ws.ID, "--", "sh", "-c", script)
	var execErr syncBuffer
	execCmd.Stdout, execCmd.Stderr = outFile, &execErr
	if err := execCmd.Start(); err != nil {
		t.Fatal(err)
	}
	received := func(n int) func() bool {
		return func() bool {
			st, err := os.Stat(outPath)
			return err == nil && st.Size() >= int64(n)
		}
	}
	step := func(i int) {
		if err := os.WriteFile(filepath.Join(ws.Root, fmt.Sprintf("step-%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	giveToAgent(t, ws.Root)
	for i := range 3 {
		eventually(t, 60*time.Second, fmt.Sprintf("step %d's output at the client", i), received(stepEnd[i]))
		p.cut()
		eventually(t, 30*time.Second, "the runner to reconnect", func() bool { return c.showWorkspace(t, ws.ID).Connected })
		step(i)
	}
	eventually(t, 60*time.Second, "step 3's output at the client", received(stepEnd[3]))
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.exited
	c2 := startController(t, serveOpts{data: data, listen: strings.TrimPrefix(c.Addr, "http://"), extraArgs: []string{"--advertise-url", p.URL()}})
	p.setTarget(c2.Addr)
	eventually(t, 30*time.Second, "the runner to reconnect to the restarted controller", func() bool { return c2.showWorkspace(t, ws.ID).Connected })
	step(3)
	eventually(t, 60*time.Second, "step 4's output at the client", received(stepEnd[4]))
	step(4)
	if err := execCmd.Wait(); err != nil {
		t.Fatalf("exec through the cuts: %v; stderr %s", err, execErr.String())
	}
	if n := strings.Count(execErr.String(), "reattaching to run"); n < 4 {
		t.Fatalf("exec reattached %d times through three cuts and a restart; stderr %s", n, execErr.String())
	}
	got, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "exec's output", got, want)

	runs := c2.runs(t, ws.ID)
	if len(runs) != 1 || runs[0].State != api.RunExited || runs[0].ExitCode == nil || *runs[0].ExitCode != 0 {
		t.Fatalf("the run's record: %+v", runs)
	}
	logs := c2.cliCmd("run", "logs", runs[0].ID)
	logsOut, err := logs.Output()
	if err != nil {
		t.Fatalf("run logs: %v", err)
	}
	sameLines(t, "run logs", logsOut, want)
	for _, off := range []int{1, stepEnd[2] - 3, len(want) - 1} {
		out, err := c2.cliCmd("run", "logs", runs[0].ID, "--stream", "stdout", "--since-offset", strconv.Itoa(off)).Output()
		if err != nil || !bytes.Equal(out, want[off:]) {
			t.Fatalf("run logs --since-offset %d: %d bytes (%v), want %d", off, len(out), err, len(want)-off)
		}
	}
}

// sameLines compares two outputs by SHA-256 and, when they differ, says where.
func sameLines(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if sha256.Sum256(got) == sha256.Sum256(want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Fatalf("%s: %d bytes, want %d; first difference at byte %d: %q", what, len(got), len(want), i, got[max(0, i-20):min(len(got), i+20)])
}
