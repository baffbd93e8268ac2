package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// agentSh runs a shell script in the workspace as its agent, through tether exec.
func agentSh(t *testing.T, c *controllerProc, ws api.Workspace, script string) {
	t.Helper()
	if r := c.cli(t, nil, "exec", ws.ID, "--", "sh", "-c", script); r.Code != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", script, r.Code, r.Stdout, r.Stderr)
	}
}

// archiveOf exports a snapshot and returns each entry's content (a directory or link: empty)
// and the manifest the archive carries.
func archiveOf(t *testing.T, cl *client.Client, snap api.Snapshot) (map[string][]byte, *snapshot.Manifest) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := cl.ExportSnapshot(context.Background(), snap.ID, &buf); err != nil {
		t.Fatalf("export %s: %v", snap.ID, err)
	}
	m, err := snapshot.ReadManifest(context.Background(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("manifest of %s: %v", snap.ID, err)
	}
	dec, err := zstd.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(dec)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, m
		}
		if err != nil {
			t.Fatalf("read archive of %s: %v", snap.ID, err)
		}
		// A 2 GiB sparse file reads as 2 GiB of zeros: keep only its head.
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// hostGitDir makes, on the host outside every workspace, a git directory whose files hold
// marker; with fifos, its HEAD and config are fifos nobody writes (an open of one for reading
// blocks forever).
func hostGitDir(t *testing.T, marker string, fifos bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "elsewhere.git")
	for _, d := range []string{"objects/info", "refs/heads"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"HEAD": "ref: refs/heads/main\n", "config": "[core]\n\tbare = false\n# " + marker + "\n",
		"refs/heads/main": strings.Repeat("a", 40) + "\n", "secret.txt": marker, "objects/info/marker": marker}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if fifos && (name == "HEAD" || name == "config") {
			if err := syscall.Mkfifo(p, 0o666); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The runner may read as the workspace's uid: everything here is world-readable.
	for p := filepath.Dir(dir); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		_ = os.Chmod(p, 0o755)
	}
	return dir
}

// TestTreeAttacks plants, as the agent, trees that once hung, crashed or leaked the save path,
// and runs snapshot create, close --check and close on each under a deadline: each must answer,
// save the workspace's own files, and put nothing from outside the workspace in any snapshot.
func TestTreeAttacks(t *testing.T) {
	c := startController(t, serveOpts{})
	cl := c.Client(t)
	marker := fmt.Sprintf("OUTSIDE-MARKER-%d", time.Now().UnixNano())
	attacks := []struct {
		name   string
		script string
		// check looks at the saved archive beyond the common checks.
		check func(t *testing.T, files map[string][]byte, m *snapshot.Manifest)
	}{
		{"a .git file naming a host git directory whose HEAD and config are fifos",
			"printf 'gitdir: %s\\n' " + hostGitDir(t, marker, true) + " > .git", nil},
		{"a .git directory whose HEAD and config are fifos",
			"mkdir -p .git/objects .git/refs/heads && mkfifo .git/HEAD .git/config", nil},
		{"a .git file naming a host git directory outside the workspace",
			"printf 'gitdir: %s\\n' " + hostGitDir(t, marker, false) + " > .git", nil},
		{"a commondir naming a host git directory outside the workspace",
			"mkdir -p .git/objects .git/refs/heads && printf 'ref: refs/heads/main\\n' > .git/HEAD && printf '%s\\n' " +
				hostGitDir(t, marker, false) + " > .git/commondir", nil},
		{"a 2 GiB sparse .git/HEAD",
			"mkdir -p .git/objects .git/refs/heads && truncate -s 2G .git/HEAD && printf '[core]\\n' > .git/config",
			func(t *testing.T, files map[string][]byte, m *snapshot.Manifest) {
				if _, ok := files[".git/HEAD"]; !ok {
					t.Errorf("the sparse HEAD is not in the snapshot: the workspace must stay saveable")
				}
				if m.Git != nil || !strings.Contains(m.GitError, "too_large") {
					t.Errorf("manifest git = %+v, git_error = %q; want no git state and a too_large git_error", m.Git, m.GitError)
				}
			}},
	}
	var tried, held int
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			tried++
			ws := c.createWorkspace(t)
			agentSh(t, c, ws, "printf 'own work\\n' > work.txt && "+a.script)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			snap, err := cl.CreateSnapshot(ctx, ws.ID)
			if ctx.Err() != nil {
				t.Fatalf("snapshot create did not answer within the deadline (hung)")
			}
			if err != nil {
				t.Fatalf("snapshot create: %v; the workspace must stay saveable", err)
			}
			files, m := archiveOf(t, cl, snap)
			if string(files["work.txt"]) != "own work\n" {
				t.Errorf("work.txt saved as %q", files["work.txt"])
			}
			for name, b := range files {
				if bytes.Contains(b, []byte(marker)) || strings.Contains(name, "secret.txt") || strings.Contains(name, "objects/info/marker") {
					t.Errorf("the snapshot holds %s, from outside the workspace", name)
				}
			}
			if a.check != nil {
				a.check(t, files, m)
			}
			pid := c.runnerPID(t, ws)
			hwm := vmHWM(t, pid)
			if hwm > 512<<20 {
				t.Errorf("the runner's peak RSS is %d MiB: it read tree-controlled data whole", hwm>>20)
			}
			agentSh(t, c, ws, "printf 'more\\n' >> work.txt")
			var chk api.CloseCheck
			if err := cl.CloseWorkspace(ctx, ws.ID, api.CloseRequest{Check: true}, &chk); err != nil {
				t.Fatalf("close --check: %v (deadline hit: %v)", err, ctx.Err() != nil)
			}
			if !chk.PendingChanges {
				t.Errorf("close --check after a change: %+v; want pending changes", chk)
			}
			var res api.CloseResult
			if err := cl.CloseWorkspace(ctx, ws.ID, api.CloseRequest{}, &res); err != nil {
				t.Fatalf("close: %v (deadline hit: %v)", err, ctx.Err() != nil)
			}
			if res.Snapshot == nil {
				t.Fatalf("close saved nothing after a change: %+v", res)
			}
			files, _ = archiveOf(t, cl, *res.Snapshot)
			if string(files["work.txt"]) != "own work\nmore\n" {
				t.Errorf("close saved work.txt as %q", files["work.txt"])
			}
			if !t.Failed() {
				held++
			}
			t.Logf("runner peak RSS %d MiB; git_error %q", hwm>>20, m.GitError)
		})
	}
	t.Logf("tree attacks: %d tried (snapshot create, close --check, close each under a deadline), %d held", tried, held)
}

// vmHWM is a process's peak resident set, from /proc.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("runner %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("runner %d: no VmHWM", pid)
	return 0
}

// TestTornWriteLoopThroughExec runs the torn-write loop on a real workspace: the agent's writer
// updates a.txt then z.txt with the same increasing counter (fixed width, rewritten in place), a
// round every few milliseconds, while the test takes 200 snapshots. Every snapshot that gets a
// receipt must hold a and z of one instant (a = z or a = z+1); the others must fail
// changed_during_capture after the controller's bounded retries. Every tenth capture is taken
// while the writer is held between rounds (it acknowledges the hold inside the sandbox before
// the capture starts): those must all succeed with a = z. Without the hold, whether any capture
// fits between bursts depends on the machine's load (0 of 200 did on a busy CI machine), and a
// capture that refuses everything would pass.
func TestTornWriteLoopThroughExec(t *testing.T) {
	c := startController(t, serveOpts{})
	cl := c.Client(t)
	ws := c.createWorkspace(t)
	// a.txt and z.txt are read far apart (a thousand files lie between them in the walk), so a
	// capture that is not fenced would often read one before a burst of writes and the other
	// after it.
	agentSh(t, c, ws, "mkdir -p src && for i in $(seq 1 1000); do echo filler > src/f$i.txt; done; printf %08d 0 > a.txt; printf %08d 0 > z.txt")
	ctx, cancel := context.WithCancel(context.Background())
	writerDone := make(chan error, 1)
	go func() {
		// Bursts of 200 rounds as fast as the shell goes, then a pause: captures that overlap a
		// burst must be refused (or retried into a pause), the others succeed. Between bursts
		// the writer honours a hold: while the file hold exists it writes nothing, and says so
		// by creating held.
		script := "n=0; while :; do " +
			"if [ -e hold ]; then : > held; while [ -e hold ]; do sleep 0.01; done; rm -f held; fi; " +
			"k=0; while [ $k -lt 200 ]; do k=$((k+1)); n=$((n+1)); printf %08d $n 1<>a.txt; printf %08d $n 1<>z.txt; done; sleep 0.03; done"
		_, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c", script}}, nil, io.Discard, io.Discard)
		writerDone <- err
	}()
	const captures = 200
	var ok, refused, mixed, quiet int
	for i := range captures {
		hold := i%10 == 9
		if hold {
			agentSh(t, c, ws, "touch hold; while [ ! -e held ]; do sleep 0.01; done")
		}
		snap, err := cl.CreateSnapshot(context.Background(), ws.ID)
		if hold {
			agentSh(t, c, ws, "rm hold")
		}
		if err != nil {
			if codeOf(err) != protocol.CodeChangedDuringCapture {
				t.Fatalf("capture %d: %v", i, err)
			}
			if hold {
				t.Errorf("capture %d, with the writer held: %v", i, err)
			}
			refused++
			continue
		}
		files, _ := archiveOf(t, cl, snap)
		a, aerr := strconv.Atoi(string(files["a.txt"]))
		z, zerr := strconv.Atoi(string(files["z.txt"]))
		if err := errors.Join(aerr, zerr); err != nil {
			t.Fatalf("capture %d: counters %q, %q: %v", i, files["a.txt"], files["z.txt"], err)
		}
		if hold && a != z {
			t.Errorf("snapshot %s, with the writer held between rounds, has a = %d, z = %d", snap.ID, a, z)
		}
		if a != z && a != z+1 {
			mixed++
			t.Errorf("snapshot %s has a = %d, z = %d: no instant of the tree held both", snap.ID, a, z)
			continue
		}
		ok++
		if hold {
			quiet++
		}
	}
	cancel()
	<-writerDone
	t.Logf("torn-write loop through exec: %d snapshots tried: %d receipts of one instant (%d of %d with the writer held), %d changed_during_capture after %d attempts each, %d mixed instants",
		captures, ok, quiet, captures/10, refused, 3, mixed)
}
