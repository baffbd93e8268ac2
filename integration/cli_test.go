package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
	"github.com/tetherhq/tether/controller/api"
)

// TestCLIConventionsAgainstAController runs the real CLI against a real controller: version,
// HOST:PORT addresses, completion from the controller, contexts, the hint on a closed workspace,
// and progress drawn on a terminal only.
func TestCLIConventionsAgainstAController(t *testing.T) {
	c := startController(t, serveOpts{})
	hostPort := strings.TrimPrefix(c.Addr, "http://")
	config := filepath.Join(t.TempDir(), "config.yaml")
	// cliIn runs the CLI with its own config file and only the environment given.
	cliIn := func(t *testing.T, stdin io.Reader, env []string, args ...string) result {
		t.Helper()
		cmd := exec.Command(bin("tether"), args...)
		cmd.Env = append(os.Environ(), "TETHER_CONFIG="+config, "TETHER_ADDR=", "TETHER_TOKEN=", "TETHER_CONTEXT=", "TETHER_DATA="+t.TempDir())
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = stdin
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("run tether %s: %v", strings.Join(args, " "), err)
		}
		return result{Stdout: stdout.String(), Stderr: stderr.String(), Code: code}
	}
	// Completion's 2 s deadline is for a person's Tab; a loaded CI machine gets longer, so the
	// test checks what is completed, not how fast.
	direct := []string{"TETHER_ADDR=" + hostPort, "TETHER_TOKEN=" + c.Token, "TETHER_COMPLETE_TIMEOUT=60s"}

	t.Run("version names the controller's", func(t *testing.T) {
		r := cliIn(t, nil, []string{"TETHER_ADDR=" + hostPort}, "version", "--json", "--timeout", "60s")
		var v struct {
			Client struct{ Version string }
			Server *struct{ Version, Addr, Status string }
		}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &v) != nil || v.Server == nil || v.Server.Version == "" ||
			v.Server.Version != v.Client.Version || v.Server.Addr != c.Addr || v.Server.Status != "ok" {
			t.Fatalf("version --json: exit %d, %q, %q", r.Code, r.Stdout, r.Stderr)
		}
	})

	ws := c.createWorkspace(t, "--name", "web-1")
	c.mustCLI(t, "service", "start", ws.ID, "sleeper", "--ready", "none", "--", "sleep", "600")
	big := make([]byte, 6<<20) // past progressMin: a bar is drawn for it on a terminal
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(t, bytes.NewReader(big), "files", "put", ws.ID, "-", "big.bin"); r.Code != 0 {
		t.Fatalf("files put: %+v", r)
	}
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", ws.ID, "--json")), &snap); err != nil {
		t.Fatal(err)
	}

	t.Run("HOST:PORT and completion from the controller", func(t *testing.T) {
		if r := cliIn(t, nil, direct, "workspace", "ls"); r.Code != 0 || !strings.Contains(r.Stdout, ws.ID) {
			t.Fatalf("workspace ls with TETHER_ADDR=%s: %+v", hostPort, r)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"__complete", "exec", ""}, "web-1\tready local\n"},
			{[]string{"__complete", "workspace", "close", "we"}, "web-1\tready local\n"},
			{[]string{"__complete", "snapshot", "restore", ""}, snap.ID + "\tweb-1 "},
			{[]string{"__complete", "service", "logs", "web-1", ""}, "sleeper\tready\n"},
			{[]string{"__complete", "artifact", "put", "f", "--workspace", ""}, "web-1\tready local\n"},
		} {
			r := cliIn(t, nil, direct, tc.args...)
			if r.Code != 0 || !strings.Contains(r.Stdout, tc.want) || !strings.HasSuffix(r.Stdout, ":4\n") {
				t.Errorf("tether %q: exit %d, stdout %q, stderr %q; want %q", tc.args, r.Code, r.Stdout, r.Stderr, tc.want)
			}
		}
		// No controller there: nothing completed, nothing said, the shell not kept waiting long.
		r := cliIn(t, nil, []string{"TETHER_ADDR=127.0.0.1:1", "TETHER_TOKEN=x"}, "__complete", "exec", "")
		if r.Code != 0 || r.Stdout != ":4\n" {
			t.Fatalf("completion without a controller: %+v", r)
		}
	})

	t.Run("a context reaches the controller", func(t *testing.T) {
		tok := filepath.Join(c.Data, "operator.token")
		if r := cliIn(t, nil, nil, "context", "set", "it", "--addr", hostPort, "--token-file", tok, "--use"); r.Code != 0 {
			t.Fatalf("context set: %+v", r)
		}
		if fi, err := os.Stat(config); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("config file: %v %v", fi, err)
		}
		if r := cliIn(t, nil, nil, "workspace", "show", "web-1", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, ws.ID) {
			t.Fatalf("workspace show through the context: %+v", r)
		}
		if r := cliIn(t, nil, []string{"TETHER_COMPLETE_TIMEOUT=60s"}, "__complete", "exec", ""); !strings.Contains(r.Stdout, "web-1\t") {
			t.Fatalf("completion through the context: %+v", r)
		}
		// Another address from the environment: the context's token is not sent there.
		if r := cliIn(t, nil, []string{"TETHER_ADDR=" + hostPort}, "workspace", "ls"); r.Code != 13 {
			t.Fatalf("TETHER_ADDR with the context's token withheld: %+v", r)
		}
	})

	t.Run("progress only on a terminal", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "snap.tar.zst")
		r := cliIn(t, nil, direct, "snapshot", "export", snap.ID, "-o", out)
		if r.Code != 0 || strings.Contains(r.Stderr, "\r") || !strings.HasPrefix(r.Stderr, "wrote "+out) {
			t.Fatalf("export with stderr a pipe: %+v", r)
		}
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer ptmx.Close()
		cmd := exec.Command(bin("tether"), "snapshot", "export", snap.ID, "-o", out)
		cmd.Env = append(os.Environ(), "TETHER_CONFIG="+config, "TETHER_CONTEXT=")
		cmd.Env = append(cmd.Env, direct...)
		cmd.Stderr = tty
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tty.Close()
		var term bytes.Buffer
		copied := make(chan struct{})
		go func() { _, _ = io.Copy(&term, ptmx); close(copied) }() // ends with EIO once the child is gone
		if err := cmd.Wait(); err != nil {
			t.Fatalf("export on a terminal: %v", err)
		}
		<-copied
		if s := term.String(); !strings.Contains(s, "\r\x1b[Ksnapshot export "+snap.ID+"  ") || !strings.Contains(s, "MiB") {
			t.Fatalf("export on a terminal drew no bar: %q", s)
		}
	})

	t.Run("a closed workspace says how to reopen it", func(t *testing.T) {
		c.mustCLI(t, "workspace", "close", ws.ID)
		r := c.cli(t, nil, "exec", "web-1", "--", "true")
		want := `error: conflict: workspace ` + ws.ID + ` is closed; reopen it with "tether workspace reopen ` + ws.ID + `"`
		if r.Code != 5 || !strings.HasPrefix(r.Stderr, want) {
			t.Fatalf("exec on a closed workspace: exit %d, %q; want 5, %q", r.Code, r.Stderr, want)
		}
	})
}
