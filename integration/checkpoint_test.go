package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func (c *controllerProc) fork(t *testing.T, ws string, args ...string) api.ForkResult {
	t.Helper()
	var res api.ForkResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, append([]string{"workspace", "fork", ws, "--json"}, args...)...)), &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// A workspace with --checkpoint-every gets a checkpoint receipt on its own once it changed, and
// none while it stays unchanged (the check time moves on); workspace update turns it off. Real
// controller, real runner, real time: the test polls the API.
func TestCheckpointReceipt(t *testing.T) {
	c := startController(t, serveOpts{})
	// Created with an interval no check reaches during the test, so the first checkpoint is of
	// the tree the exec below wrote, however long the exec takes on a loaded machine (with 1s, an
	// exec slower than a second left a checkpoint of the empty tree first); then set to 1s.
	ws := c.createWorkspace(t, "--name", "cp", "--checkpoint-every", "1h")
	if got := c.showWorkspace(t, "cp"); got.CheckpointEvery == nil || time.Duration(got.CheckpointInterval) != time.Hour {
		t.Fatalf("created with --checkpoint-every 1h: %+v", got)
	}
	c.mustCLI(t, "exec", "cp", "--", "sh", "-c", "echo one > one.txt")
	c.mustCLI(t, "workspace", "update", "cp", "--checkpoint-every", "1s")
	var first api.Snapshot
	eventually(t, 60*time.Second, "a checkpoint receipt", func() bool {
		list := c.snapshots(t, "cp")
		if len(list) > 0 {
			first = list[0]
		}
		return len(list) > 0
	})
	if !first.Checkpoint || first.WorkspaceID != ws.ID {
		t.Fatalf("the first receipt: %+v; want a checkpoint of %s", first, ws.ID)
	}
	if out := c.mustCLI(t, "snapshot", "ls", "cp"); !strings.Contains(out, "checkpoint") {
		t.Fatalf("snapshot ls does not show the kind:\n%s", out)
	}
	// Unchanged: later checks happen (the check time passes the receipt) and make no receipt.
	eventually(t, 60*time.Second, "a later check of the unchanged tree", func() bool {
		got := c.showWorkspace(t, "cp")
		return got.LastCheckpointAt != nil && got.LastCheckpointAt.After(first.CreatedAt.Add(time.Second))
	})
	if list := c.snapshots(t, "cp"); len(list) != 1 {
		t.Fatalf("an unchanged tree got receipts: %d", len(list))
	}
	if out := c.mustCLI(t, "workspace", "ls"); !strings.Contains(out, "every 1s") {
		t.Fatalf("workspace ls does not show the interval:\n%s", out)
	}
	// Changed again: a second checkpoint, child of the first.
	c.mustCLI(t, "exec", "cp", "--", "sh", "-c", "echo two > two.txt")
	eventually(t, 60*time.Second, "a second checkpoint receipt", func() bool { return len(c.snapshots(t, "cp")) == 2 })
	if list := c.snapshots(t, "cp"); !list[1].Checkpoint || list[1].Parent != first.ID {
		t.Fatalf("second receipt: %+v", list[1])
	}
	// ... and incremental although the checks in between were dropped: their capture caches
	// hold the first receipt's very tree, so one.txt is a ref into the first receipt's object.
	if list := c.snapshots(t, "cp"); len(list[1].Layers) != 1 || list[1].Layers[0] != first.ObjectKey {
		t.Fatalf("the checkpoint after unchanged checks is not incremental on the first: layers %v, first %s", list[1].Layers, first.ObjectKey)
	}
	// Off.
	var off api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "update", "cp", "--checkpoint-every", "0", "--json")), &off); err != nil {
		t.Fatal(err)
	}
	if off.CheckpointInterval != 0 {
		t.Fatalf("after --checkpoint-every 0: %+v", off)
	}
	if r := c.cli(t, nil, "workspace", "update", "cp", "--checkpoint-every", "1ms"); r.Code == 0 || !strings.Contains(r.Stderr, "invalid_argument") {
		t.Fatalf("a 1ms interval: %+v", r)
	}
}

// A fork of 3 from a fresh checkpoint: three ready workspaces, each with the tree and Git state
// exactly, its own allocation and lease, and writes of one not in another.
func TestForkWorkspace(t *testing.T) {
	src := gitRepo(t)
	c := startController(t, serveOpts{})
	orig := c.createWorkspace(t, "--source", src, "--name", "orig")
	before := c.mustCLI(t, "exec", "orig", "--", "sh", "-c", gitView)

	res := c.fork(t, "orig", "--count", "3")
	if len(res.Workspaces) != 3 || !res.Snapshot.Checkpoint || res.Snapshot.WorkspaceID != orig.ID {
		t.Fatalf("fork: %+v", res)
	}
	allocs := map[string]bool{orig.AllocationID: true}
	for i, w := range res.Workspaces {
		if want := "orig-fork-" + string(rune('1'+i)); w.Name != want || w.State != api.StateReady || allocs[w.AllocationID] {
			t.Fatalf("fork %d: %+v; want %s, ready, an allocation of its own", i, w, want)
		}
		allocs[w.AllocationID] = true
		if got := c.mustCLI(t, "exec", w.Name, "--", "sh", "-c", gitView); got != before {
			t.Fatalf("%s differs from its source\nsource:\n%s\nfork:\n%s", w.Name, before, got)
		}
	}
	// Each fork's writer lease is its own: all three are taken at once.
	leases := map[string]api.Lease{}
	for _, w := range res.Workspaces {
		l := c.acquire(t, w.Name, "--holder", "agent-"+w.Name, "--ttl", "1m")
		if l.WorkspaceID != w.ID {
			t.Fatalf("lease of %s: %+v", w.Name, l)
		}
		leases[w.Name] = l
	}
	c.mustCLI(t, "exec", "orig-fork-1", "--epoch", fmt.Sprint(leases["orig-fork-1"].Epoch), "--", "sh", "-c", "echo mine > only-in-1.txt")
	for _, name := range []string{"orig", "orig-fork-2", "orig-fork-3"} {
		args := []string{"exec", name}
		if l, ok := leases[name]; ok {
			args = append(args, "--epoch", fmt.Sprint(l.Epoch))
		}
		if r := c.cli(t, nil, append(args, "--", "test", "!", "-e", "only-in-1.txt")...); r.Code != 0 {
			t.Fatalf("a write in orig-fork-1 shows in %s: %+v", name, r)
		}
	}
	// Unchanged since: the next fork starts from the same receipt, no new one (the source
	// base, taken when --source was imported, is the other receipt).
	receipts := len(c.snapshots(t, "orig"))
	again := c.fork(t, "orig", "--name-prefix", "again")
	if again.Snapshot.ID != res.Snapshot.ID || len(c.snapshots(t, "orig")) != receipts {
		t.Fatalf("a fork of an unchanged tree made a new receipt: %s, was %s", again.Snapshot.ID, res.Snapshot.ID)
	}
	// --from a receipt of another workspace is refused; nothing is made.
	if r := c.cli(t, nil, "workspace", "fork", "orig-fork-1", "--from", res.Snapshot.ID, "--name-prefix", "wrong"); r.Code == 0 || !strings.Contains(r.Stderr, "not a receipt of") {
		t.Fatalf("fork --from another workspace's receipt: %+v", r)
	}
}

// A project workspace's forks each get their own branch at the same commit, moved inside the
// sandbox; a fork that cannot take its branch fails the whole fork, and the forks made are
// removed.
func TestForkProjectWorkspace(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir)
	c.createWorkspace(t, "--project", p.Name, "--name", "pw")
	c.mustCLI(t, "exec", "pw", "--", "sh", "-c", "echo wip > wip.txt")
	head := c.wsGit(t, "pw", "rev-parse", "HEAD")

	res := c.fork(t, "pw", "--count", "2")
	for _, w := range res.Workspaces {
		want := "tether/" + w.Name
		if w.Git == nil || w.Git.Branch != want || w.Git.ProjectID != p.ID {
			t.Fatalf("%s git record: %+v; want branch %s", w.Name, w.Git, want)
		}
		in := c.inspect(t, w.Name)
		if in.Branch != want || in.Head != head || in.Untracked != 1 {
			t.Fatalf("%s inspect: %+v; want %s at %s with wip.txt untracked", w.Name, in, want, head)
		}
		if got := c.wsGit(t, w.Name, "rev-parse", "--abbrev-ref", "HEAD"); got != want {
			t.Fatalf("%s: git says HEAD is on %q", w.Name, got)
		}
	}
	if got := c.wsGit(t, "pw", "rev-parse", "--abbrev-ref", "HEAD"); got != "tether/pw" {
		t.Fatalf("the source moved to %q", got)
	}

	// bad-2's branch exists in the tree it is forked from: its fork fails after its restore, and
	// bad-1 and bad-3, made, are removed.
	c.wsGit(t, "pw", "branch", "tether/bad-2")
	r := c.cli(t, nil, "workspace", "fork", "pw", "--count", "3", "--name-prefix", "bad")
	if r.Code == 0 || !strings.Contains(r.Stderr, "bad-2:") || !strings.Contains(r.Stderr, "exists already") || strings.Contains(r.Stderr, "bad-1:") {
		t.Fatalf("fork with a taken branch: %+v", r)
	}
	var list []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, w := range list {
		if strings.HasPrefix(w.Name, "bad-") {
			t.Fatalf("a failed fork left %s (%s)", w.Name, w.State)
		}
	}
}

// A restore whose new workspace fails to provision, or whose request ends while it provisions,
// leaves no workspace behind: neither the failed record (which held the name and made a retry
// fail with "exists") nor a ready one nobody restored into (found in review).
func TestFailedRestoreLeavesNoWorkspace(t *testing.T) {
	c := startController(t, serveOpts{})
	c.createWorkspace(t, "--name", "orig")
	c.mustCLI(t, "exec", "orig", "--", "sh", "-c", "echo kept > a.txt")
	snap := c.snapshot(t, "orig")
	cl := c.Client(t)
	ctx := context.Background()

	// The provider refuses the option when it creates the sandbox: the workspace fails.
	_, err := cl.RestoreSnapshot(ctx, snap.ID, api.RestoreRequest{Name: "again", Options: map[string]string{"no-such-option": "1"}})
	if err == nil {
		t.Fatal("a restore with an option the provider refuses succeeded")
	}
	// The request ends before the workspace is ready.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = cl.RestoreSnapshot(cctx, snap.ID, api.RestoreRequest{Name: "cut"})
	cancel()
	if err == nil {
		t.Skip("the restore finished within 50 ms; the cut-off request was not exercised")
	}
	// Once the controller is done with both, only orig is left, and both names can be taken.
	deadline := time.Now().Add(time.Minute)
	for {
		names := map[string]string{}
		list, err := cl.ListWorkspaces(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range list {
			names[w.Name] = string(w.State)
		}
		if len(names) == 1 && names["orig"] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspaces left by failed restores: %v", names)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range []string{"again", "cut"} {
		res, err := cl.RestoreSnapshot(ctx, snap.ID, api.RestoreRequest{Name: name})
		if err != nil {
			t.Fatalf("restore as %s after a failed one: %v", name, err)
		}
		if got := c.mustCLI(t, "exec", name, "--", "cat", "a.txt"); got != "kept\n" {
			t.Fatalf("%s (%s): a.txt = %q", name, res.Workspace.ID, got)
		}
	}
}
