package confine

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/process"
)

// The test binary is its own sandbox init, as the runner binary is in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		os.Exit(Init(os.Args[2:]))
	}
	code := m.Run()
	if code == 0 {
		// goleak.VerifyTestMain would exit before the init branch above could run.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const testHostUID = 1_000_123

type sandboxFixture struct {
	policy    Policy
	workspace string
	secret    string // a host file outside the workspace
}

func newSandbox(t *testing.T) sandboxFixture {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "root")
	state := filepath.Join(base, "sandbox")
	for _, d := range []string{ws, state, filepath.Join(state, "mnt"), filepath.Join(state, "tmp"), filepath.Join(state, "home")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(base, "operator.token")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Policy{Mode: protocol.IsolationNamespaces, Workspace: ws, StateDir: state, Self: self, UID: -1, GID: -1}
	if os.Geteuid() == 0 {
		p.UID, p.GID = testHostUID, testHostUID
		for _, d := range []string{ws, filepath.Join(state, "tmp"), filepath.Join(state, "home")} {
			if err := os.Chown(d, testHostUID, testHostUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	return sandboxFixture{policy: p, workspace: ws, secret: secret}
}

// run runs a shell script confined and returns its output and exit.
func (f sandboxFixture) run(t *testing.T, script string) (string, process.Exit) {
	t.Helper()
	var out bytes.Buffer
	p, err := process.Start(process.Spec{
		Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/root"},
		Dir: f.workspace, Stdout: &out, Stderr: &out, Confiner: f.policy,
	})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := p.Wait(t.Context())
	if err != nil {
		t.Fatalf("confined %q: %v (output %q)", script, err, out.String())
	}
	return out.String(), exit
}

func TestNamespacesShowOnlyTheSandbox(t *testing.T) {
	f := newSandbox(t)
	out, exit := f.run(t, `
		echo "uid=$(id -u) gid=$(id -g) home=$HOME pwd=$(pwd) host=$(hostname)"
		cat hello.txt; echo
		echo "maxpid=$(ls /proc | grep '^[0-9]' | sort -n | tail -1)"
		tr '\0' ' ' < /proc/1/cmdline | grep -q -- `+InitArg+` && echo init-is-pid-1
		cat `+f.secret+` 2>/dev/null && echo SECRET-READ
		ls / | tr '\n' ' '; echo
		wc -c < /etc/shadow 2>/dev/null || echo noshadow
		touch /usr/x 2>/dev/null && echo USR-WRITTEN
		touch /x 2>/dev/null && echo ROOT-WRITTEN
		ls /proc/self/fd | grep -qx 4 && echo STATUS-FD-INHERITED
		echo made > made.txt && echo wrote-workspace
		echo t > /tmp/t && echo wrote-tmp
		grep -c . /etc/passwd
	`)
	if exit.Code != 0 {
		t.Fatalf("exit %+v, output:\n%s", exit, out)
	}
	for _, want := range []string{"uid=1000 gid=1000 home=/home/agent pwd=/workspace host=tether", "hi", "wrote-workspace", "wrote-tmp"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"SECRET-READ", "USR-WRITTEN", "ROOT-WRITTEN", "STATUS-FD-INHERITED"} {
		if strings.Contains(out, bad) {
			t.Errorf("the sandbox let through %s:\n%s", bad, out)
		}
	}
	// Only the init, the shell and what it runs are in the pid namespace: no host process.
	if !strings.Contains(out, "init-is-pid-1") || !strings.Contains(out, "maxpid=") || strings.Contains(out, "maxpid=1\n") {
		t.Errorf("the pid namespace is not the command's own:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "maxpid="); ok && len(v) > 2 {
			t.Errorf("the sandbox sees pid %s: host processes are visible", v)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(f.workspace, "made.txt"), &st); err != nil {
		t.Fatal(err)
	}
	want := uint32(os.Getuid())
	if os.Geteuid() == 0 {
		want = testHostUID
	}
	if st.Uid != want {
		t.Errorf("a file the agent made belongs to host uid %d, want %d", st.Uid, want)
	}
}

func TestNamespacesReportExitAndSignal(t *testing.T) {
	f := newSandbox(t)
	if _, exit := f.run(t, "exit 7"); exit.Code != 7 || exit.Signal != 0 {
		t.Errorf("exit 7 reported as %+v", exit)
	}
	if _, exit := f.run(t, "kill -9 $$"); exit.Signal != 9 {
		t.Errorf("a SIGKILLed command reported as %+v", exit)
	}
	// Background work ends with the command: its pid namespace dies with the init.
	out, _ := f.run(t, "sleep 30 & echo started")
	if !strings.Contains(out, "started") {
		t.Errorf("output %q", out)
	}
}

func TestNamespacesCommandNotFound(t *testing.T) {
	f := newSandbox(t)
	var out bytes.Buffer
	p, err := process.Start(process.Spec{Argv: []string{"no-such-command-xyz"}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: f.workspace, Stdout: &out, Stderr: &out, Confiner: f.policy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(t.Context()); err == nil || !strings.Contains(err.Error(), "no-such-command-xyz") {
		t.Errorf("a missing command: err %v", err)
	}
}

// TestNamespacesUnprivileged runs the sandbox tests again as an unprivileged user, whose runner
// can only map itself: the init then needs a user namespace of its own to mount anything.
func TestNamespacesUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: the other tests cover it")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "confine-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "confine.test")
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run", "^TestNamespaces(ShowOnlyTheSandbox|ReportExitAndSignal|CommandNotFound|Terminal)$", "-test.count=1", "-test.v")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + dir, "HOME=" + dir}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
	for _, name := range []string{"ShowOnlyTheSandbox", "Terminal"} {
		if !strings.Contains(string(out), "--- PASS: TestNamespaces"+name) {
			t.Fatalf("the unprivileged run did not pass TestNamespaces%s:\n%s", name, out)
		}
	}
}
