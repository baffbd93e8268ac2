package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

func TestCreateStartsRunnerWithPrivateDirsAndEnv(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfigured(t)
	out := filepath.Join(t.TempDir(), "env.txt")
	runner := writeScript(t, `env > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"; pwd > "$OUT.cwd"; exec sleep 300`+"\n")

	alloc, err := p.Create(ctx, createReq("a1", runner, map[string]string{"OUT": out, "EXTRA": "x y"}))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "a1") })

	dir := filepath.Join(stateDir, "a1")
	root := filepath.Join(dir, "root")
	if alloc.ID != "a1" || alloc.Root != root {
		t.Fatalf("allocation = %+v, want root %s", alloc, root)
	}
	for _, d := range []string{stateDir, dir, root} {
		if m := mode(t, d); !m.IsDir() || m.Perm() != 0o700 {
			t.Errorf("%s mode = %v, want drwx------", d, m)
		}
	}
	if m := mode(t, filepath.Join(dir, "runner.log")); m.Perm() != 0o600 {
		t.Errorf("runner.log mode = %v, want 0600", m)
	}

	env := strings.Split(waitFile(t, out), "\n")
	wantEnv := []string{
		"TETHER_RUNNER_TOKEN=secret-token-a1",
		"TETHER_CONTROLLER_URL=http://127.0.0.1:7420",
		"TETHER_ALLOCATION_ID=a1",
		"TETHER_WORKSPACE_ID=ws-1",
		"TETHER_WORKSPACE_ROOT=" + root,
		"EXTRA=x y",
	}
	for _, kv := range wantEnv {
		if !slices.Contains(env, kv) {
			t.Errorf("runner env lacks %q", kv)
		}
	}
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	if first, _, _ := strings.Cut(path, ":"); first != filepath.Dir(runner) {
		t.Errorf("PATH = %q, want it to start with %s", path, filepath.Dir(runner))
	}
	if cwd := strings.TrimSpace(waitFile(t, out+".cwd")); cwd != root {
		t.Errorf("runner cwd = %q, want %q", cwd, root)
	}

	pidText, err := os.ReadFile(filepath.Join(dir, "runner.pid"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(pidText))
	if len(fields) != 2 || fields[0] != alloc.Info["pid"] {
		t.Fatalf("runner.pid = %q, allocation pid %s", pidText, alloc.Info["pid"])
	}
	pid, _ := strconv.Atoi(fields[0])
	st, err := readProcStat(pid)
	if err != nil || strconv.FormatUint(st.start, 10) != fields[1] {
		t.Fatalf("runner.pid start time %s does not match /proc (%+v, %v)", fields[1], st, err)
	}
	if st.session != pid {
		t.Errorf("runner session = %d, want its own (%d)", st.session, pid)
	}
	if pgid, _ := syscall.Getpgid(pid); pgid != pid {
		t.Errorf("runner pgid = %d, want %d", pgid, pid)
	}
}

func TestCreateRejectsBadRequests(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfigured(t)
	runner := writeScript(t, "exec sleep 300\n")
	cases := map[string]struct {
		req  provider.CreateRequest
		code string
	}{
		"dotdot id":    {createReq("..", runner, nil), provider.CodeInvalidArgument},
		"slash id":     {createReq("a/b", runner, nil), provider.CodeInvalidArgument},
		"empty id":     {createReq("", runner, nil), provider.CodeInvalidArgument},
		"relative bin": {createReq("a", "fake-runner", nil), provider.CodeInvalidArgument},
		"missing bin":  {createReq("a", "/nonexistent/tether-runner", nil), provider.CodeNotFound},
		"reserved env": {createReq("a", runner, map[string]string{"TETHER_RUNNER_TOKEN": "x"}), provider.CodeInvalidArgument},
		"bad env key":  {createReq("a", runner, map[string]string{"A=B": "x"}), provider.CodeInvalidArgument},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Create(ctx, tc.req)
			wantCode(t, err, tc.code)
		})
	}
	noToken := createReq("a", runner, nil)
	noToken.RunnerToken = ""
	_, err := p.Create(ctx, noToken)
	wantCode(t, err, provider.CodeInvalidArgument)

	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Errorf("rejected creates left %d entries in the state dir", len(entries))
	}
	_, err = New("x").Create(ctx, createReq("a", runner, nil))
	wantCode(t, err, provider.CodeFailedPrecondition)
}

func TestCreateTwiceConflicts(t *testing.T) {
	ctx := context.Background()
	p, _ := newConfigured(t)
	runner := writeScript(t, "exec sleep 300\n")
	if _, err := p.Create(ctx, createReq("a1", runner, nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "a1") })
	_, err := p.Create(ctx, createReq("a1", runner, nil))
	wantCode(t, err, provider.CodeConflict)
}

func TestStopKillsWholeGroup(t *testing.T) {
	ctx := context.Background()
	p, _ := newConfigured(t)
	tmp := t.TempDir()
	runner := writeScript(t, `sleep 300 & echo $! > "$CHILD"; echo $$ > "$SELF"; wait`+"\n")
	env := map[string]string{"CHILD": filepath.Join(tmp, "child"), "SELF": filepath.Join(tmp, "self")}
	if _, err := p.Create(ctx, createReq("g1", runner, env)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "g1") })
	child, self := readPid(t, env["CHILD"]), readPid(t, env["SELF"])
	if !alive(child) || !alive(self) {
		t.Fatal("runner or its child is not running")
	}
	if err := p.Stop(ctx, "g1"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitGone(t, self)
	waitGone(t, child)
	if err := p.Stop(ctx, "g1"); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// A runner that ignores SIGTERM, and a command it put in its own process
// group (as the runner does for every command), are both SIGKILLed once the
// grace period is over.
func TestStopEscalatesAndSweepsSession(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl is needed to start a child in its own process group")
	}
	ctx := context.Background()
	p, _ := newConfigured(t)
	p.stopGrace = 300 * time.Millisecond
	tmp := t.TempDir()
	runner := writeScript(t, `trap '' TERM
perl -e 'setpgrp(0,0); open(my $f, ">", $ENV{CHILD}) or die; print $f "$$\n"; close $f; $SIG{TERM}="IGNORE"; sleep 300' &
echo $$ > "$SELF"
while :; do sleep 1; done
`)
	env := map[string]string{"CHILD": filepath.Join(tmp, "child"), "SELF": filepath.Join(tmp, "self")}
	if _, err := p.Create(ctx, createReq("s1", runner, env)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "s1") })
	child, self := readPid(t, env["CHILD"]), readPid(t, env["SELF"])
	if pgid, _ := syscall.Getpgid(child); pgid != child {
		t.Fatalf("child pgid = %d, want its own group %d", pgid, child)
	}
	if err := p.Stop(ctx, "s1"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitGone(t, self)
	waitGone(t, child)
}

// A fresh provider (as after a controller restart) stops a runner an
// earlier one started, using only runner.pid.
func TestStopFromNewProviderInstance(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfigured(t)
	tmp := t.TempDir()
	runner := writeScript(t, `echo $$ > "$SELF"; exec sleep 300`+"\n")
	env := map[string]string{"SELF": filepath.Join(tmp, "self")}
	if _, err := p.Create(ctx, createReq("r1", runner, env)); err != nil {
		t.Fatal(err)
	}
	self := readPid(t, env["SELF"])

	p2 := New("test")
	if err := p2.Configure(ctx, provider.Config{StateDir: stateDir}); err != nil {
		t.Fatal(err)
	}
	if err := p2.Destroy(ctx, "r1"); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	waitGone(t, self)
}

// A pid file whose start time does not match names a recycled pid: Stop
// must leave that process alone.
func TestStopIgnoresRecycledPid(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfigured(t)
	bystander := exec.Command("sleep", "300")
	bystander.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })
	pid := bystander.Process.Pid
	st, err := readProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(stateDir, "old")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, marker{Allocation: "old", Workspace: "ws-1"}); err != nil {
		t.Fatal(err)
	}
	if err := writePidFile(filepath.Join(dir, "runner.pid"), pid, st.start-1); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, "old"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if !alive(pid) {
		t.Fatal("Stop killed a process with a different start time")
	}
}

func TestDestroyRemovesEverything(t *testing.T) {
	ctx := context.Background()
	p, stateDir := newConfigured(t)
	tmp := t.TempDir()
	// Read-only directories, as the Go module cache makes, must not stop
	// Destroy.
	runner := writeScript(t, `mkdir -p ro/sub && touch ro/sub/f && chmod 0555 ro/sub ro; echo $$ > "$SELF"; exec sleep 300`+"\n")
	env := map[string]string{"SELF": filepath.Join(tmp, "self")}
	if _, err := p.Create(ctx, createReq("d1", runner, env)); err != nil {
		t.Fatal(err)
	}
	self := readPid(t, env["SELF"])
	if err := p.Destroy(ctx, "d1"); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	waitGone(t, self)
	if _, err := os.Lstat(filepath.Join(stateDir, "d1")); !os.IsNotExist(err) {
		t.Fatalf("allocation dir still there: %v", err)
	}
	for _, id := range []string{"d1", "never-created"} {
		if err := p.Destroy(ctx, id); err != nil {
			t.Errorf("Destroy(%s) again: %v", id, err)
		}
		if err := p.Stop(ctx, id); provider.ErrorCode(err) != provider.CodeNotFound {
			t.Errorf("Stop(%s) = %v, want not_found", id, err)
		}
	}
}

// If the runner died and left commands behind, Stop still finds them
// through the session id.
func TestStopSweepsOrphansOfDeadRunner(t *testing.T) {
	ctx := context.Background()
	p, _ := newConfigured(t)
	tmp := t.TempDir()
	runner := writeScript(t, `sleep 300 & echo $! > "$CHILD"; echo $$ > "$SELF"; exit 0`+"\n")
	env := map[string]string{"CHILD": filepath.Join(tmp, "child"), "SELF": filepath.Join(tmp, "self")}
	if _, err := p.Create(ctx, createReq("o1", runner, env)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Destroy(ctx, "o1") })
	child, self := readPid(t, env["CHILD"]), readPid(t, env["SELF"])
	waitGone(t, self)
	if !alive(child) {
		t.Fatal("orphaned child is not running")
	}
	if err := p.Stop(ctx, "o1"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitGone(t, child)
}
