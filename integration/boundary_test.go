package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"
)

// The attack suite: every attempt runs as the agent, through `tether exec`, and must fail. Each
// names the promise it tests (DESIGN.md, safety contract 7: the agent never shares a uid, a
// process view or the host's files with the runner or the controller).

// attack is one attempt from inside a workspace.
type attack struct {
	promise string
	script  string
	// leaked lists what must not appear in the output: the attempt succeeded if one does.
	leaked []string
	// tokens: no Tether token (bootstrap, session, operator) may appear in the output.
	tokens bool
	// after, if set, checks from the host that the attempt changed nothing.
	after func(t *testing.T)
}

func runAttacks(t *testing.T, c *controllerProc, ws string, attacks []attack) {
	t.Helper()
	// One subtest per promise: the report says which held and which broke.
	for _, a := range attacks {
		t.Run(a.promise, func(t *testing.T) {
			r := c.cli(t, nil, "exec", ws, "--", "sh", "-c", a.script)
			out := r.Stdout + r.Stderr
			if m := tokenPattern.FindString(out); a.tokens && m != "" {
				t.Errorf("BROKEN PROMISE: the agent got a token %q\nscript: %s\noutput:\n%s", clip(m), a.script, out)
			}
			for _, secret := range a.leaked {
				if secret != "" && strings.Contains(out, secret) {
					t.Errorf("BROKEN PROMISE: the agent got %q\nscript: %s\noutput:\n%s", clip(secret), a.script, out)
				}
			}
			if a.after != nil {
				a.after(t)
			}
		})
	}
}

// searchAll greps, for s, every file the agent can read where a token could be left: what
// Tether or a provider writes (not the read-only system directories, nor the endless or blocking
// files of /proc, /sys and /dev).
func searchAll(s string) string {
	return `for d in /tmp /run /home /root /workspace /etc /var /opt /data /.tether /.dockerenv; do [ -e "$d" ] && grep -rsaE -m1 '` + s + `' "$d" 2>/dev/null | head -3; done; `
}

// tokenPattern matches any token the controller issues (the attempts' own scripts name only the
// prefixes, which must not count).
var tokenPattern = regexp.MustCompile(`t(bt|ss|ot)_[0-9a-f]{64}`)

func clip(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}

// TestBoundaryLocal attacks the local provider's default sandbox.
func TestBoundaryLocal(t *testing.T) {
	c := startController(t, serveOpts{})
	victim := c.createWorkspace(t, "--name", "victim")
	c.mustCLI(t, "exec", victim.ID, "--", "sh", "-c", "echo victim-private-bytes > secret.txt")
	ws := c.createWorkspace(t, "--name", "attacker")
	if got := c.showWorkspace(t, ws.ID); got.AllocationInfo["isolation"] != "namespaces" {
		t.Errorf("workspace show: allocation info %v, want isolation namespaces", got.AllocationInfo)
	}

	operatorToken := c.Token
	snapshotKey, _ := os.ReadFile(filepath.Join(c.Data, "snapshot.key"))
	keyLine := ""
	for _, l := range strings.Split(string(snapshotKey), "\n") {
		if strings.HasPrefix(l, "AGE-SECRET-KEY-") {
			keyLine = l
		}
	}
	runnerPID := c.runnerPID(t, ws)
	controllerPID := c.cmd.Process.Pid
	bootstrap := bootstrapToken(t, runnerPID)
	victimRoot := filepath.Join(c.allocationDir(victim), "root")
	home, _ := os.UserHomeDir()

	runAttacks(t, c, ws.ID, []attack{
		{promise: "the agent cannot read the operator token",
			script: fmt.Sprintf("cat %s/operator.token %s/.tether/operator.token; "+searchAll("tot_"), c.Data, home),
			leaked: []string{operatorToken}, tokens: true},
		{promise: "the agent cannot read the snapshot key",
			script: fmt.Sprintf("cat %s/snapshot.key; ls %s", c.Data, c.Data),
			leaked: []string{keyLine, "tether.db"}},
		{promise: "the agent cannot read another workspace",
			script: fmt.Sprintf("cat %s/secret.txt; cat /proc/*/root%s/secret.txt; find / -name secret.txt -exec cat {} \\; 2>/dev/null", victimRoot, victimRoot),
			leaked: []string{"victim-private-bytes"}},
		{promise: "the agent cannot read the runner's environment or memory",
			script: fmt.Sprintf("cat /proc/%d/environ; head -c 4096 /proc/%d/mem; cat /proc/*/environ; grep -a tbt_ /proc/*/cmdline", runnerPID, runnerPID),
			leaked: []string{bootstrap}, tokens: true},
		{promise: "the agent cannot read the controller's environment",
			script: fmt.Sprintf("cat /proc/%d/environ /proc/%d/cmdline", controllerPID, controllerPID),
			leaked: []string{"TETHER_", c.Data}},
		{promise: "the agent sees no host process (runner, controller, anything)",
			script: "ps -eo pid,args; cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
			leaked: []string{"tether serve", "dockerd", "--data " + c.Data}},
		{promise: "the agent cannot stop or kill the runner",
			script: fmt.Sprintf("kill -STOP %d; kill -9 %d; echo tried", runnerPID, runnerPID),
			after: func(t *testing.T) {
				if st := procState(runnerPID); st == "" || st == "T" || st == "Z" {
					t.Errorf("BROKEN PROMISE: the runner's state after the agent's kill -STOP is %q", st)
				}
			}},
		{promise: "the agent cannot run the operator's CLI against the controller",
			script: fmt.Sprintf("TETHER_ADDR=%s %s workspace ls; ls %s", c.Addr, bin("tether"), filepath.Dir(bin("tether"))),
			leaked: []string{victim.ID, "tether-provider-local"}},
		{promise: "the agent cannot write the host's system directories",
			script: "touch /usr/bin/pwned /etc/pwned /bin/pwned /pwned 2>&1; echo done",
			after: func(t *testing.T) {
				for _, p := range []string{"/usr/bin/pwned", "/etc/pwned", "/pwned"} {
					if _, err := os.Lstat(p); err == nil {
						os.Remove(p)
						t.Errorf("BROKEN PROMISE: the agent wrote %s on the host", p)
					}
				}
			}},
		{promise: "the agent reads no secret of the host's /etc",
			script: "cat /etc/shadow /etc/gshadow; grep -c . /etc/passwd",
			leaked: []string{"root:$", "root:!", "root:*:"}},
	})

	// The agent is never root, nor the runner's uid, on the host.
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo mine > mine.txt")
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(c.allocationDir(ws), "root", "mine.txt"), &st); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && (st.Uid == 0 || st.Uid < 1<<30) {
		t.Errorf("BROKEN PROMISE: a file the agent made belongs to host uid %d (want an unprivileged uid ≥ 2^30)", st.Uid)
	}
	if os.Geteuid() != 0 && int(st.Uid) != os.Getuid() {
		t.Errorf("a file the agent made belongs to host uid %d, want the controller's %d", st.Uid, os.Getuid())
	}
	// After all of it the runner still serves: nothing the agent did took it over or down.
	if out := c.mustCLI(t, "exec", ws.ID, "--", "echo", "still-serving"); !strings.Contains(out, "still-serving") {
		t.Errorf("exec after the attacks printed %q", out)
	}
}

// TestIsolationNoneIsRecorded: running without isolation is possible only when asked, and shows.
func TestIsolationNoneIsRecorded(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--provider-opt", "isolation=none")
	if got := c.showWorkspace(t, ws.ID); got.AllocationInfo["isolation"] != "none" {
		t.Errorf("workspace show --json: allocation info %v, want isolation none", got.AllocationInfo)
	}
	if out := c.mustCLI(t, "workspace", "show", ws.ID); !strings.Contains(out, "none") {
		t.Errorf("workspace show does not say isolation none:\n%s", out)
	}
	// Unconfined, the agent is the controller's own user: the reason it must be asked for.
	if out := c.mustCLI(t, "exec", ws.ID, "--", "id", "-u"); strings.TrimSpace(out) != strconv.Itoa(os.Getuid()) {
		t.Errorf("isolation=none runs as uid %q, want the controller's", out)
	}
}

// procState is the state letter of /proc/PID/stat ("" if gone). A stop the agent managed to
// send would also hang the exec each test runs after its attacks, the check a late-landing
// SIGSTOP cannot slip past.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// bootstrapToken reads, from the host, the runner's spent bootstrap token: still in its original
// environment block, which the agent must never read.
func bootstrapToken(t *testing.T, runnerPID int) string {
	t.Helper()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", runnerPID))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("TETHER_RUNNER_TOKEN=")); ok && len(v) > 0 {
			return string(v)
		}
	}
	t.Fatal("test setup: the runner's bootstrap token is not in its /proc environ")
	return ""
}

// TestBoundaryDocker attacks a Docker workspace with the provider's defaults: the runner is the
// container's root, the agent another uid, the network the workspace's own.
func TestBoundaryDocker(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker")
	info := c.showWorkspace(t, ws.ID).AllocationInfo
	if info["isolation"] != "uid" {
		t.Errorf("workspace show: allocation info %v, want isolation uid", info)
	}
	res, err := cli.ContainerInspect(t.Context(), "tether-"+ws.AllocationID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The runner, seen from the host: the child of the container's init.
	var runnerPID int
	for _, p := range childrenOf(res.Container.State.Pid) {
		if strings.Contains(cmdline(p), "tether-runner") {
			runnerPID = p
		}
	}
	if runnerPID == 0 {
		t.Fatalf("no runner under the container's init %d", res.Container.State.Pid)
	}
	bootstrap := bootstrapToken(t, runnerPID)
	// The runner's pid inside the container: the process running /tether-runner as uid 0.
	const findRunner = `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in /tether-runner*) grep -q '^Uid:[[:space:]]*0[[:space:]]' $p/status && R=${p#/proc/};; esac; done; `

	if out := c.mustCLI(t, "exec", ws.ID, "--", "id", "-u"); strings.TrimSpace(out) == "0" {
		t.Errorf("BROKEN PROMISE: the agent runs as the runner's uid 0")
	}
	runAttacks(t, c, ws.ID, []attack{
		{promise: "the agent cannot read the runner's environment, memory or descriptors",
			script: findRunner + `echo "runner=$R"; cat /proc/$R/environ; head -c 65536 /proc/$R/mem; ls -l /proc/$R/fd; cat /proc/*/environ; grep -a tss_ /proc/*/cmdline`,
			leaked: []string{bootstrap, "socket:["}, tokens: true},
		{promise: "the agent cannot stop, kill or trace the runner",
			script: findRunner + `kill -STOP $R; kill -9 $R; echo tried`,
			after: func(t *testing.T) {
				if st := procState(runnerPID); st == "" || st == "T" || st == "Z" {
					t.Errorf("BROKEN PROMISE: the runner's state after the agent's kill -STOP is %q", st)
				}
			}},
		{promise: "the agent cannot reach the controller's runner socket",
			script: `ls -la /run/tether /run/tether/controller; cat /run/tether/controller/runner.sock; test -S /run/tether/controller/runner.sock && echo SOCKET-REACHED; cat /.tether/* 2>&1`,
			leaked: []string{"SOCKET-REACHED", "srwx", "TETHER_RUNNER_TOKEN="}, tokens: true},
		{promise: "the agent finds no token anywhere it can read",
			script: searchAll("t(bt|ss|ot)_") + "env",
			leaked: []string{bootstrap}, tokens: true},
	})
	if out := c.mustCLI(t, "exec", ws.ID, "--", "echo", "still-serving"); !strings.Contains(out, "still-serving") {
		t.Errorf("exec after the attacks printed %q", out)
	}
}
