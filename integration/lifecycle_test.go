package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// A dropped websocket does not stop work: the running command survives, the runner reconnects
// with backoff, the next exec works, the exec whose stream was cut reattaches and ends with the
// command's status, and the run is settled with its real exit.
func TestReconnectKeepsProcessesRunning(t *testing.T) {
	p := startProxy(t)
	c := startController(t, serveOpts{extraArgs: []string{"--advertise-url", p.URL()}})
	p.setTarget(c.Addr)
	ws := c.createWorkspace(t)

	// The command's own $$ is a pid of its pid namespace (the local provider confines it), so
	// its host pid is found by a marker in its command line.
	marker := "reconnect-" + ws.ID
	long := c.cliCmd("exec", ws.ID, "--", "sh", "-c", "echo $$ > long.pid; while [ ! -e go-on ]; do sleep 0.05; done; echo finished > long.done; exit 7 # "+marker)
	var longErr bytes.Buffer
	long.Stderr = &longErr
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the long command to start", func() bool {
		_, err := os.Stat(filepath.Join(ws.Root, "long.pid"))
		return err == nil
	})
	pid := 0
	for _, p := range hostPIDs(marker) {
		if p != long.Process.Pid { // the CLI's own command line names the marker too
			pid = p
		}
	}
	if pid == 0 {
		t.Fatalf("no host process runs the long command (marker %s)", marker)
	}

	p.cut()
	// The exec's stream is lost with the socket, and the CLI reattaches to the run once the
	// runner is back: it ends with the command's own status.
	eventually(t, 30*time.Second, "the runner to reconnect", func() bool { return c.showWorkspace(t, ws.ID).Connected })
	if !alive(pid) {
		t.Fatal("the command died with the socket")
	}
	if r := c.cli(t, nil, "exec", ws.ID, "--", "echo", "after"); r.Code != 0 || r.Stdout != "after\n" {
		t.Fatalf("exec after reconnect: %+v", r)
	}
	if !alive(pid) {
		t.Fatal("the command died after the reconnect")
	}
	if err := os.WriteFile(filepath.Join(ws.Root, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := long.Wait(); exitCode(err) != 7 || !strings.Contains(longErr.String(), "reattaching to run") {
		t.Fatalf("exec over a cut socket: want it to reattach and exit 7, got %v / %q", err, longErr.String())
	}
	eventually(t, 20*time.Second, "the detached run to be settled with its exit code", func() bool {
		for _, r := range c.runs(t, ws.ID) {
			if strings.Contains(strings.Join(r.Argv, " "), "long.pid") {
				return r.State == api.RunExited && r.ExitCode != nil && *r.ExitCode == 7
			}
		}
		return false
	})
}

// A runner with a made-up token, or with a bootstrap token that was already used, is refused and
// exits instead of retrying forever.
func TestRunnerTokenRefused(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)

	// The bootstrap token the provider handed the real runner: one use, already spent.
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.runnerPID(t, ws)))
	if err != nil {
		t.Fatal(err)
	}
	var used string
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "TETHER_RUNNER_TOKEN="); ok {
			used = v
		}
	}
	if used == "" {
		t.Fatal("could not find the runner's bootstrap token")
	}
	for name, token := range map[string]string{
		"forged":                 "tbt_" + strings.Repeat("ab", 32),
		"reused":                 used,
		"garbage":                "not-a-token",
		"session-shaped forgery": "tss_" + strings.Repeat("cd", 32),
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin("tether-runner"))
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"TETHER_CONTROLLER_URL=" + c.Addr, "TETHER_RUNNER_TOKEN=" + token,
				"TETHER_ALLOCATION_ID=" + ws.AllocationID, "TETHER_WORKSPACE_ROOT=" + cmd.Dir, "PATH=/usr/bin:/bin"}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(stderr.String(), "refused") {
					t.Fatalf("runner with a %s token: err %v, stderr %s", name, err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("runner with a %s token kept running", name)
			}
		})
	}
	// The legitimate runner is untouched.
	if r := c.cli(t, nil, "exec", ws.ID, "--", "true"); r.Code != 0 {
		t.Fatalf("exec after refused runners: %+v", r)
	}
}

// SIGKILL the controller: its plugin process must not outlive it. The runner does (work goes on),
// and a controller restarted on the same data dir gets it back.
func TestControllerKilledPluginsDieRunnersReconnect(t *testing.T) {
	data := t.TempDir()
	c := startController(t, serveOpts{data: data})
	ws := c.createWorkspace(t)
	var plugins []int
	for _, pid := range childrenOf(c.cmd.Process.Pid) {
		if strings.Contains(cmdline(pid), "tether-provider-local") {
			plugins = append(plugins, pid)
		}
	}
	if len(plugins) != 1 {
		t.Fatalf("want one provider plugin process, found %v", plugins)
	}
	runner := c.runnerPID(t, ws)
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the plugin process to exit", func() bool { return !alive(plugins[0]) })
	if !alive(runner) {
		t.Fatal("the runner died with the controller")
	}

	c2 := startController(t, serveOpts{data: data, listen: strings.TrimPrefix(c.Addr, "http://")})
	eventually(t, 30*time.Second, "the runner to reconnect to the new controller", func() bool {
		return c2.showWorkspace(t, ws.ID).Connected
	})
	if r := c2.cli(t, nil, "exec", ws.ID, "--", "echo", "back"); r.Code != 0 || r.Stdout != "back\n" {
		t.Fatalf("exec after controller restart: %+v", r)
	}
	c2.mustCLI(t, "workspace", "rm", ws.ID)
	eventually(t, 15*time.Second, "the runner to stop", func() bool { return !alive(runner) })
}

// A runner that never connects makes a failed workspace with the reason, after a bounded wait,
// and whatever the provider started is stopped.
func TestRunnerThatNeverConnectsFailsWorkspace(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "silent-runner")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho $$ > \"$TETHER_WORKSPACE_ROOT/../silent.pid\"\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := startController(t, serveOpts{extraArgs: []string{"--runner-bin", fake, "--ready-timeout", "2s"}})
	// A shell script cannot confine anything: this sandbox is asked to confine nothing.
	r := c.cli(t, nil, "workspace", "create", "--json", "--provider-opt", "isolation=none")
	if r.Code == 0 || !strings.Contains(r.Stderr, "error: provider_failed: ") || !strings.Contains(r.Stderr, "did not connect within 2s") {
		t.Fatalf("create with a silent runner: %+v", r)
	}
	var ws api.Workspace
	if err := json.Unmarshal([]byte(r.Stdout), &ws); err != nil {
		t.Fatalf("--json printed %q: %v", r.Stdout, err)
	}
	if ws.State != api.StateFailed || !strings.Contains(ws.Reason, "did not connect") {
		t.Fatalf("failed workspace record: %+v", ws)
	}
	pid := readPID(t, filepath.Join(c.allocationDir(ws), "silent.pid"))
	eventually(t, 15*time.Second, "the silent runner to be stopped", func() bool { return !alive(pid) })
	if got := c.showWorkspace(t, ws.ID); got.State != api.StateFailed {
		t.Fatalf("show: %+v", got)
	}
}

func TestCreateFromGitSourceAndRemove(t *testing.T) {
	src := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "first")
	head := strings.TrimSpace(git("rev-parse", "HEAD"))
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--source", src, "--name", "from-git")
	r := c.cli(t, nil, "exec", "from-git", "--", "sh", "-c", "git rev-parse HEAD; git status --porcelain; ./run.sh; readlink link")
	want := head + "\n M a.txt\nran\na.txt\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("workspace from a Git checkout: %+v, want stdout %q", r, want)
	}
	// ls and show print JSON values of the right shape.
	var list []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil || len(list) != 1 || list[0].ID != ws.ID {
		t.Fatalf("ls --json: %v %+v", err, list)
	}
	runner := c.runnerPID(t, ws)
	c.mustCLI(t, "workspace", "rm", "from-git")
	if _, err := os.Stat(c.allocationDir(ws)); !os.IsNotExist(err) {
		t.Fatalf("allocation dir still there after rm: %v", err)
	}
	eventually(t, 15*time.Second, "the runner to exit", func() bool { return !alive(runner) })
	if r := c.cli(t, nil, "workspace", "show", "from-git"); r.Code != 3 || !strings.HasPrefix(r.Stderr, "error: not_found: ") {
		t.Fatalf("show after rm: %+v", r)
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil || len(list) != 0 {
		t.Fatalf("ls after rm: %v %+v", err, list)
	}
}

func TestCLIErrors(t *testing.T) {
	c := startController(t, serveOpts{})
	for _, tc := range []struct {
		args   []string
		code   int
		prefix string
	}{
		{[]string{"workspace", "show", "nope"}, 3, "error: not_found: "},
		{[]string{"exec", "nope", "--", "true"}, 3, "error: not_found: "},
		{[]string{"workspace", "create", "--name", "bad name!"}, 2, "error: invalid_argument: "},
		{[]string{"workspace", "create", "--provider", "nosuch"}, 3, "error: not_found: "},
		{[]string{"workspace", "create", "--source", "/definitely/missing"}, 2, "error: invalid_argument: "},
		{[]string{"exec", "x"}, 2, "error: invalid_argument: "},
		{[]string{"workspace", "ls", "--bogus"}, 2, "error: invalid_argument: "},
		{[]string{"--token", "tot_wrong", "workspace", "ls"}, 13, "error: unauthorized: "},
		{[]string{"--addr", "http://127.0.0.1:1", "workspace", "ls"}, 15, "error: unavailable: "},
		{[]string{"--addr", "127.0.0.1:1", "workspace", "ls"}, 15, "error: unavailable: "},
		{[]string{"--addr", "127.0.0.1:1/v1", "workspace", "ls"}, 2, "error: invalid_argument: controller address"},
		// Unknown commands and subcommands: a usage error with the nearest name, never help and 0.
		{[]string{"worksapce", "ls"}, 2, `error: invalid_argument: unknown command "worksapce" for "tether"; did you mean "workspace"?`},
		{[]string{"workspace", "lss"}, 2, `error: invalid_argument: unknown command "lss" for "tether workspace"; did you mean "ls"?`},
		{[]string{"project", "rm", "P"}, 2, `error: invalid_argument: unknown command "rm" for "tether project"`},
		{[]string{"snapshot", "rm", "snap_nope"}, 3, "error: not_found: "},
	} {
		r := c.cli(t, nil, tc.args...)
		if r.Code != tc.code || !strings.HasPrefix(r.Stderr, tc.prefix) || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("tether %s: want exit %d and one line %q..., got %+v", strings.Join(tc.args, " "), tc.code, tc.prefix, r)
		}
	}
	var list []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil || len(list) != 0 {
		t.Fatalf("bad input changed something: %v %+v", err, list)
	}
}

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo starts its own controller")
	}
	cmd := exec.Command(bin("tether"), "demo")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tether demo: %v\n%s", err, out)
	}
	for _, want := range []string{"Add hello.sh", "hello from a Tether workspace", "(exit status 3)", "on a new allocation", "snapshot restore", "closed; reopens from", "more work", "untrusted true", "service web ready",
		"data.bin: 262144 bytes, sha256 ", "sha256 match: ", "refused: path_escape: ", "run_", "done"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// Ids of one kind are never accepted where another kind is expected.
func TestIDKindsAreDistinct(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--name", "kinds")
	runs := func() string {
		c.mustCLI(t, "exec", "kinds", "--", "true")
		return c.runs(t, "kinds")[0].ID
	}()
	for _, args := range [][]string{
		{"workspace", "show", ws.AllocationID},
		{"exec", runs, "--", "true"},
		{"snapshot", "show", ws.ID},
		{"run", "show", ws.ID},
		{"snapshot", "create", ws.AllocationID},
	} {
		if r := c.cli(t, nil, args...); r.Code != 2 || !strings.HasPrefix(r.Stderr, "error: invalid_argument: ") {
			t.Errorf("tether %s: %+v", strings.Join(args, " "), r)
		}
	}
	if r := c.cli(t, nil, "workspace", "create", "--name", "al_lookalike"); r.Code != 2 {
		t.Fatalf("a name that looks like an id: %+v", r)
	}
}
