package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// TestSecondControllerOnADataDirIsRefused: a second `tether serve` on a data directory in use
// exits with unavailable naming the first's pid, changes nothing there, and the first keeps
// serving its workspace.
func TestSecondControllerOnADataDirIsRefused(t *testing.T) {
	first := startController(t, serveOpts{})
	ws := first.createWorkspace(t)
	sock := filepath.Join(first.Data, "run", "runner.sock")
	before := fileIDs(t, first.Data, sock)

	attempts, refused := 0, 0
	for _, args := range [][]string{
		{"serve", "--data", first.Data, "--listen", "127.0.0.1:0"},
		// Another address changes nothing: the directory is what is held.
		{"serve", "--data", first.Data + "/", "--listen", "127.0.0.1:0", "--http-max-conns", "8"},
	} {
		attempts++
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, bin("tether"), args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("second controller %v: %v (it should have exited refused); stderr:\n%s", args, err, stderr.String())
		}
		want := fmt.Sprintf("error: unavailable: data directory %s is in use by pid %d\n", first.Data, first.cmd.Process.Pid)
		if ee.ExitCode() != protocol.CodeUnavailable.ExitCode() || !strings.HasSuffix(stderr.String(), want) {
			t.Errorf("second controller %v: exit %d, stderr %q; want exit %d ending %q",
				args, ee.ExitCode(), stderr.String(), protocol.CodeUnavailable.ExitCode(), want)
			continue
		}
		refused++
	}
	if after := fileIDs(t, first.Data, sock); after != before {
		t.Errorf("the refused controllers changed the data directory:\nbefore %s\nafter  %s", before, after)
	}
	if out := first.mustCLI(t, "exec", ws.ID, "--", "echo", "still-serving"); strings.TrimSpace(out) != "still-serving" {
		t.Errorf("the first controller after the refusals: exec printed %q", out)
	}
	t.Logf("datadir-lock: %d second controllers tried, %d refused with the holder's pid, the first still served", attempts, refused)
}

// fileIDs sums up what a refused controller could have touched: the lock's pid, the operator
// token, the runner socket's inode.
func fileIDs(t *testing.T, data, sock string) string {
	t.Helper()
	lock, err := os.ReadFile(filepath.Join(data, "controller.lock"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(data, "operator.token"))
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil {
		t.Fatalf("runner socket: %v", err)
	}
	return fmt.Sprintf("lock pid %q, token %d bytes %x…, socket inode %d", strings.TrimSpace(string(lock)), len(tok), tok[:min(4, len(tok))], st.Ino)
}
