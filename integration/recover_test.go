package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tetherhq/tether/controller/api"
)

// A Docker workspace's container removed outside Tether (docker rm -f) while it held unsaved
// work and an active run: the controller's upkeep asks the provider, finds the sandbox gone and
// makes the workspace lost, recording what was lost and failing the run. Recover rebuilds it on
// a new allocation from its receipt: the receipt's files are there, the unsaved file is not,
// the run stays failed, and the events hold the loss and the decision with its note.
func TestDockerLostWorkspaceRecovers(t *testing.T) {
	cli := dockerEngine(t)
	c := startDockerController(t, cli)
	ws := c.createOn(t, "docker")

	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo saved > kept.txt")
	snap := c.snapshot(t, ws.ID)
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo unsaved > unsaved.txt")
	runID := strings.TrimSpace(c.mustCLI(t, "exec", "--detach", ws.ID, "--", "sleep", "600"))
	if !strings.HasPrefix(runID, "run_") {
		t.Fatalf("exec --detach printed %q", runID)
	}

	// Refused while nothing is lost.
	if r := c.cli(t, nil, "workspace", "recover", ws.ID); r.Code == 0 || !strings.Contains(r.Stderr, "error: conflict:") {
		t.Fatalf("recover of a ready workspace: exit %d\n%s", r.Code, r.Stderr)
	}

	if _, err := cli.ContainerRemove(context.Background(), "tether-"+ws.AllocationID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	// The upkeep runs every second on the controller's clock; the bound is liveness, not timing.
	eventually(t, time.Minute, "the workspace lost", func() bool { return c.showWorkspace(t, ws.ID).State == api.StateLost })
	lost := c.showWorkspace(t, ws.ID)
	if !strings.Contains(lost.Reason, "destroyed outside Tether") {
		t.Fatalf("lost workspace's reason: %q", lost.Reason)
	}
	loss := eventTo(t, c, ws.ID, api.StateLost)
	for _, want := range []string{"unsaved changes since receipt " + snap.ID, "active runs failed: " + runID, ws.AllocationID} {
		if !strings.Contains(loss, want) {
			t.Fatalf("the lose event %q does not say %q", loss, want)
		}
	}
	failedByLoss := func() bool {
		for _, r := range c.runs(t, ws.ID) {
			if r.ID == runID {
				return r.State == api.RunFailed && strings.Contains(r.Error, "destroyed outside Tether")
			}
		}
		t.Fatalf("run %s not listed", runID)
		return false
	}
	// The loss is recorded first (the transition is its guard); failing the runs and removing
	// what the provider left follow it.
	eventually(t, time.Minute, "the active run failed by the loss", failedByLoss)
	eventually(t, time.Minute, "the lost allocation's network removed", func() bool { return len(networksOf(t, cli, ws.AllocationID)) == 0 })
	// Its last receipt is still readable while it is lost.
	if got := c.mustCLI(t, "files", "get", ws.ID, "kept.txt"); got != "saved\n" {
		t.Fatalf("files get of a lost workspace = %q", got)
	}

	const note = "container removed by a host cleanup script"
	var rec api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "recover", ws.ID, "--note", note, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != api.StateReady || rec.AllocationID == ws.AllocationID || rec.Epoch <= lost.Epoch {
		t.Fatalf("recovered: %+v (lost on %s, epoch %d)", rec, ws.AllocationID, lost.Epoch)
	}
	if names := containersOf(t, cli, rec.AllocationID); len(names) != 1 {
		t.Fatalf("containers of the new allocation: %v", names)
	}
	out := c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "cat kept.txt; test -e unsaved.txt && echo unsaved is back || echo no unsaved")
	if out != "saved\nno unsaved\n" {
		t.Fatalf("the recovered tree:\n%s", out)
	}
	if !failedByLoss() {
		t.Fatal("the run failed by the loss is no longer failed after the recover")
	}
	decision := eventTo(t, c, ws.ID, api.StateRecovering)
	for _, want := range []string{"recover decided by operator", "receipt " + snap.ID, "note: " + note} {
		if !strings.Contains(decision, want) {
			t.Fatalf("the recover event %q does not say %q", decision, want)
		}
	}
	if eventTo(t, c, ws.ID, api.StateLost) != loss {
		t.Fatal("the loss is no longer recorded after the recover")
	}
	// Nothing is lost now: a second recover is refused.
	if r := c.cli(t, nil, "workspace", "recover", ws.ID); r.Code == 0 || !strings.Contains(r.Stderr, "only a lost workspace") {
		t.Fatalf("second recover: exit %d\n%s", r.Code, r.Stderr)
	}
}

// eventTo is the cause of the workspace's latest event into state to.
func eventTo(t *testing.T, c *controllerProc, id string, to api.WorkspaceState) string {
	t.Helper()
	var evs []api.Event
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "events", id, "--json")), &evs); err != nil {
		t.Fatal(err)
	}
	cause := ""
	for _, e := range evs {
		if e.To == to && e.From != to {
			cause = e.Cause
		}
	}
	if cause == "" {
		t.Fatalf("no event into %s among %+v", to, evs)
	}
	return cause
}
