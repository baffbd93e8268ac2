package integration

import (
	"crypto/rand"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// storedFiles lists every file in the controller's directory blob store, temporaries included.
func storedFiles(t *testing.T, c *controllerProc) []string {
	t.Helper()
	var out []string
	root := filepath.Join(c.Data, "blobs")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func (c *controllerProc) snapshots(t *testing.T, ws string) []api.Snapshot {
	t.Helper()
	var list []api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "ls", ws, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	return list
}

// noTrace asserts a failed capture left no receipt, no object and no temporary.
func noTrace(t *testing.T, c *controllerProc, ws string) {
	t.Helper()
	if list := c.snapshots(t, ws); len(list) != 0 {
		t.Fatalf("a failed capture left receipts: %+v", list)
	}
	eventually(t, 10*time.Second, "the blob store to hold nothing", func() bool { return len(storedFiles(t, c)) == 0 })
}

func bigRandomFile(t *testing.T, path string, size int) {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, path, b, 0o644)
}

func TestSnapshotFailsWhenAFileChangesDuringCapture(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	bigRandomFile(t, filepath.Join(ws.Root, "big"), 64<<20)
	appender := c.cliCmd("exec", ws.ID, "--timeout", "2m", "--", "sh", "-c", "while :; do echo x >> big; done")
	if err := appender.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = appender.Process.Signal(os.Interrupt); _ = appender.Wait() }()
	eventually(t, 20*time.Second, "the appender to start", func() bool {
		fi, err := os.Stat(filepath.Join(ws.Root, "big"))
		return err == nil && fi.Size() > 64<<20
	})
	r := c.cli(t, nil, "snapshot", "create", ws.ID)
	if r.Code != 10 || !strings.HasPrefix(r.Stderr, "error: changed_during_capture: ") || !strings.Contains(r.Stderr, "big") {
		t.Fatalf("capture of a changing file: %+v", r)
	}
	noTrace(t, c, ws.ID)
}

// A runner killed, or a websocket cut, half-way through a capture: no receipt, no object.
func TestSnapshotInterruptedLeavesNothing(t *testing.T) {
	for _, how := range []string{"runner killed", "socket cut"} {
		t.Run(how, func(t *testing.T) {
			p := startProxy(t)
			c := startController(t, serveOpts{extraArgs: []string{"--advertise-url", p.URL()}})
			p.setTarget(c.Addr)
			ws := c.createWorkspace(t)
			bigRandomFile(t, filepath.Join(ws.Root, "big"), 256<<20)
			runner := c.runnerPID(t, ws)

			create := c.cliCmd("snapshot", "create", ws.ID)
			var stderr strings.Builder
			create.Stderr = &stderr
			if err := create.Start(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "the capture to be under way", func() bool {
				ents, _ := os.ReadDir(filepath.Join(c.Data, "blobs", ".tmp"))
				for _, e := range ents {
					if fi, err := e.Info(); err == nil && fi.Size() > 1<<20 {
						return true
					}
				}
				return false
			})
			if how == "runner killed" {
				if err := syscall.Kill(runner, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			} else {
				p.cut()
			}
			err := create.Wait()
			if _, ok := err.(*exec.ExitError); !ok || !strings.HasPrefix(stderr.String(), "error: ") {
				t.Fatalf("interrupted capture: %v, stderr %q", err, stderr.String())
			}
			noTrace(t, c, ws.ID)
		})
	}
}

func TestSnapshotCorruptObjectIsRefused(t *testing.T) {
	c := startController(t, serveOpts{})
	c.createWorkspace(t, "--source", gitRepo(t), "--name", "orig")
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "orig", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(c.Data, "blobs", filepath.FromSlash(snap.ObjectKey))
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(obj, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(t, nil, "snapshot", "verify", snap.ID); r.Code != 25 || !strings.HasPrefix(r.Stderr, "error: corrupt: ") {
		t.Fatalf("verify of a corrupted object: %+v", r)
	}
	if r := c.cli(t, nil, "snapshot", "restore", snap.ID, "--name", "bad"); r.Code == 0 || !strings.Contains(r.Stderr, "corrupt") {
		t.Fatalf("restore of a corrupted object: %+v", r)
	}
	var list []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("a failed restore left a workspace behind: %v %+v", err, list)
	}
	out := filepath.Join(t.TempDir(), "x.tar.zst")
	if r := c.cli(t, nil, "snapshot", "export", snap.ID, "-o", out); r.Code == 0 {
		t.Fatalf("export of a corrupted object succeeded: %+v", r)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a failed export left its output file")
	}
}

// Objects no receipt names (a controller that died between storing and recording) are swept
// when a controller starts; receipted ones stay.
func TestStartupSweepsUnreceiptedObjects(t *testing.T) {
	data := t.TempDir()
	c := startController(t, serveOpts{data: data})
	c.createWorkspace(t, "--name", "w")
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "w", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	c.removeAll(t)
	c.Stop()
	for _, p := range []string{"snapshots/ws_gone/snap_orphan.tar.zst", ".tmp/leftover"} {
		full := filepath.Join(data, "blobs", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c2 := startController(t, serveOpts{data: data, extraArgs: []string{"--sweep-grace", "0s"}})
	// The receipt's objects stay: its archive and its resolved manifest.
	got := storedFiles(t, c2)
	want := []string{filepath.FromSlash(snap.ManifestKey), filepath.FromSlash(snap.ObjectKey)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after the sweep the store holds %v; want only %v", got, want)
	}
}
