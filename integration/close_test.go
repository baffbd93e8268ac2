package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func TestCloseSavesThenReopenRestores(t *testing.T) {
	blobs := filepath.Join(t.TempDir(), "blobs")
	c := startController(t, serveOpts{extraArgs: []string{"--blobs", "file://" + blobs}})
	ws := c.createWorkspace(t, "--source", gitRepo(t), "--name", "life")
	before := c.mustCLI(t, "exec", "life", "--", "sh", "-c", gitView)

	var chk api.CloseCheck
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "life", "--check", "--json")), &chk); err != nil {
		t.Fatal(err)
	}
	if !chk.Ready || !chk.PendingChanges || chk.ActiveRuns != 0 {
		t.Fatalf("close --check of a never-saved workspace: %+v", chk)
	}

	// Active runs hold the close back unless asked.
	long := c.cliCmd("exec", "life", "--", "sh", "-c", "echo started > started; sleep 300")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the run to start", func() bool {
		_, err := os.Stat(filepath.Join(ws.Root, "started"))
		return err == nil
	})
	if r := c.cli(t, nil, "workspace", "close", "life"); r.Code != 5 || !strings.Contains(r.Stderr, "active run") {
		t.Fatalf("close with an active run: %+v", r)
	}
	_ = long.Process.Signal(os.Interrupt)
	_ = long.Wait()
	eventually(t, 10*time.Second, "the run to end", func() bool {
		for _, r := range c.runs(t, "life") {
			if r.State == api.RunRunning {
				return false
			}
		}
		return true
	})
	if err := os.Remove(filepath.Join(ws.Root, "started")); err != nil {
		t.Fatal(err)
	}

	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "life", "--json")), &closed); err != nil {
		t.Fatal(err)
	}
	if closed.Workspace.State != api.StateClosed || closed.Snapshot == nil || closed.Saved != closed.Snapshot.ID {
		t.Fatalf("close of a dirty workspace: %+v", closed)
	}
	if _, err := os.Stat(c.allocationDir(ws)); !os.IsNotExist(err) {
		t.Fatalf("the sandbox survived the close: %v", err)
	}
	if r := c.cli(t, nil, "exec", "life", "--", "true"); r.Code != 5 {
		t.Fatalf("exec on a closed workspace: %+v", r)
	}

	var reopened api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reopen", "life", "--json")), &reopened); err != nil {
		t.Fatal(err)
	}
	if reopened.State != api.StateReady || reopened.AllocationID == ws.AllocationID || reopened.Epoch <= ws.Epoch {
		t.Fatalf("reopened workspace: %+v (was %+v)", reopened, ws)
	}
	// Nothing changed since the save: a close now needs no new snapshot.
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "life", "--check", "--json")), &chk); err != nil || chk.PendingChanges {
		t.Fatalf("close --check right after reopen: %+v, %v", chk, err)
	}
	if after := c.mustCLI(t, "exec", "life", "--", "sh", "-c", gitView); after != before {
		t.Fatalf("files and Git state differ after close and reopen\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A close whose snapshot cannot be stored refuses and releases nothing.
	if err := os.WriteFile(filepath.Join(reopened.Root, "new-work"), []byte("unsaved\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(blobs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blobs, []byte("the store is gone"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(t, nil, "workspace", "close", "life"); r.Code == 0 {
		t.Fatalf("close with a broken blob store: %+v", r)
	}
	if got := c.showWorkspace(t, "life"); got.State != api.StateReady || !got.Connected || got.AllocationID != reopened.AllocationID {
		t.Fatalf("a refused close changed the workspace: %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(reopened.Root, "new-work")); err != nil || string(b) != "unsaved\n" {
		t.Fatalf("unsaved work after a refused close: %q, %v", b, err)
	}

	var evs []api.Event
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "events", "life", "--json")), &evs); err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, e := range evs {
		path = append(path, string(e.To))
	}
	want := "provisioning ready closing closed reopening ready closing ready"
	if strings.Join(path, " ") != want {
		t.Fatalf("events %q; want %q", strings.Join(path, " "), want)
	}
	runs := c.runs(t, "life")
	var run api.Run
	if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "show", runs[len(runs)-1].ID, "--json")), &run); err != nil {
		t.Fatal(err)
	}
	if run.WorkspaceID != ws.ID || run.AllocationID != reopened.AllocationID || run.Epoch != reopened.Epoch {
		t.Fatalf("run show: %+v", run)
	}
}
