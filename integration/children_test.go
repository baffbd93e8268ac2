package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// bgCLI is a CLI run in the background.
type bgCLI struct {
	done           chan struct{}
	stdout, stderr bytes.Buffer
	code           int
}

func (c *controllerProc) startCLI(t *testing.T, args ...string) *bgCLI {
	t.Helper()
	b := &bgCLI{done: make(chan struct{})}
	cmd := c.cliCmd(args...)
	cmd.Stdout, cmd.Stderr = &b.stdout, &b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(b.done)
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			b.code = ee.ExitCode()
		case err != nil:
			b.code = -1
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-b.done
	})
	return b
}

// running fails the test if the command already ended.
func (b *bgCLI) running(t *testing.T, when string) {
	t.Helper()
	select {
	case <-b.done:
		t.Fatalf("the command ended %s: exit %d\nstdout: %s\nstderr: %s", when, b.code, b.stdout.String(), b.stderr.String())
	default:
	}
}

// wait waits for the command to end (a bound against a hang, not a timing assertion).
func (b *bgCLI) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the command did not end")
	}
	return result{Stdout: b.stdout.String(), Stderr: b.stderr.String(), Code: b.code}
}

func hasCause(evs []api.Event, cause string) bool {
	for _, e := range evs {
		if strings.Contains(e.Cause, cause) {
			return true
		}
	}
	return false
}

// waitRegistered returns once the parent's events show child waiting for its next save.
func (c *controllerProc) waitRegistered(t *testing.T, parent, child string) {
	t.Helper()
	eventually(t, time.Minute, child+" waiting on "+parent, func() bool {
		return hasCause(c.events(t, parent), "child "+child+" waits for the next save")
	})
}

func (c *controllerProc) workspaceNames(t *testing.T) map[string]api.Workspace {
	t.Helper()
	var list []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--all", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]api.Workspace{}
	for _, w := range list {
		out[w.Name] = w
	}
	return out
}

func decodeWorkspace(t *testing.T, out string) api.Workspace {
	t.Helper()
	var ws api.Workspace
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("workspace JSON %q: %v", out, err)
	}
	return ws
}

// wantRefused fails unless the CLI run failed with the code and a message containing want.
func wantRefused(t *testing.T, r result, code, want string) {
	t.Helper()
	if r.Code == 0 || !strings.Contains(r.Stderr, code+":") || !strings.Contains(r.Stderr, want) {
		t.Fatalf("want %s (%q); got exit %d\nstdout: %s\nstderr: %s", code, want, r.Code, r.Stdout, r.Stderr)
	}
}

// A child continues its parent's last receipt — not the parent's unsaved edits — on an
// allocation of its own, leaves the parent as it was, records where it came from, and holds
// writer authority over itself alone.
func TestChildContinuesTheParentsReceipt(t *testing.T) {
	c := startController(t, serveOpts{})
	parent := c.createWorkspace(t, "--name", "parent")
	c.mustCLI(t, "exec", "parent", "--", "sh", "-c", "echo saved > kept.txt")
	snap := c.snapshot(t, "parent")
	c.mustCLI(t, "exec", "parent", "--", "sh", "-c", "echo edited > kept.txt && echo new > unsaved.txt")

	// Refusals change nothing.
	bare := c.createWorkspace(t, "--name", "bare")
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "bare", "--name", "bare-kid"), "conflict", "tether snapshot create "+bare.ID)
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "nope", "--name", "x"), "not_found", "nope")
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "bare", "--from-snapshot", snap.ID, "--name", "x"), "invalid_argument", "not a receipt of")
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "parent", "--wait-timeout", "1m", "--name", "x"), "invalid_argument", "--wait-timeout needs --wait-for-save")
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "parent", "--project", "p", "--name", "x"), "invalid_argument", "--project")
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "parent", "--branch", "b", "--name", "x"), "invalid_argument", "not a project workspace")
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "parent", "--name", "bare"), "exists", "bare")
	if r := c.cli(t, nil, "workspace", "create", "--from", "parent", "--source", t.TempDir(), "--name", "x"); r.Code == 0 || !strings.Contains(r.Stderr, "exclude each other") {
		t.Fatalf("--from with --source: %+v", r)
	}
	if names := c.workspaceNames(t); len(names) != 2 {
		t.Fatalf("refused children left workspaces: %v", names)
	}

	kid := decodeWorkspace(t, c.mustCLI(t, "workspace", "create", "--from", "parent", "--name", "kid", "--json"))
	if kid.State != api.StateReady || kid.ID == parent.ID || kid.AllocationID == parent.AllocationID ||
		kid.Parent == nil || kid.Parent.Workspace != parent.ID || kid.Parent.Snapshot != snap.ID {
		t.Fatalf("child: %+v (parent %+v); want ready, its own allocation, parent %s at %s", kid, kid.Parent, parent.ID, snap.ID)
	}
	if got := c.showWorkspace(t, "kid"); got.Parent == nil || *got.Parent != *kid.Parent {
		t.Fatalf("show: parent %+v", got.Parent)
	}
	if out := c.mustCLI(t, "workspace", "show", "kid"); !strings.Contains(out, parent.ID+" at receipt "+snap.ID) {
		t.Fatalf("show does not say where the child came from:\n%s", out)
	}
	if got := c.mustCLI(t, "exec", "kid", "--", "cat", "kept.txt"); got != "saved\n" {
		t.Fatalf("the child's kept.txt: %q; want the receipt's", got)
	}
	c.mustCLI(t, "exec", "kid", "--", "test", "!", "-e", "unsaved.txt")
	if got := c.mustCLI(t, "exec", "parent", "--", "cat", "kept.txt", "unsaved.txt"); got != "edited\nnew\n" {
		t.Fatalf("the parent changed: %q", got)
	}
	if list := c.snapshots(t, "parent"); len(list) != 1 {
		t.Fatalf("making a child saved the parent: %d receipts", len(list))
	}
	if !hasCause(c.events(t, "kid"), "created from workspace "+parent.ID+" (parent) at receipt "+snap.ID) {
		t.Fatalf("the child's events: %+v", c.events(t, "kid"))
	}
	if !hasCause(c.events(t, "parent"), "child "+kid.ID+" (kid) made from receipt "+snap.ID) {
		t.Fatalf("the parent's events: %+v", c.events(t, "parent"))
	}
	// --from-snapshot names a receipt of the parent.
	named := decodeWorkspace(t, c.mustCLI(t, "workspace", "create", "--from", "parent", "--from-snapshot", snap.ID, "--name", "named", "--json"))
	if named.Parent == nil || named.Parent.Snapshot != snap.ID {
		t.Fatalf("child from a named receipt: %+v", named.Parent)
	}

	// Writer authority: the parent's lease admits no write to the child, nor the child's to
	// the parent; each holds only over its own workspace.
	pl := c.acquire(t, "parent", "--holder", "parent-agent", "--ttl", "5m")
	c.mustCLI(t, "exec", "kid", "--", "sh", "-c", "echo free > free.txt") // the parent's lease does not hold the child
	wantRefused(t, c.cli(t, nil, "exec", "kid", "--epoch", fmt.Sprint(pl.Epoch), "--", "touch", "by-parent"), "stale_epoch", "")
	kl := c.acquire(t, "kid", "--holder", "kid-agent", "--ttl", "5m")
	if kl.Epoch == pl.Epoch {
		t.Fatalf("the child's lease has the parent's epoch %d", pl.Epoch)
	}
	wantRefused(t, c.cli(t, nil, "exec", "kid", "--epoch", fmt.Sprint(pl.Epoch), "--", "touch", "by-parent"), "stale_epoch", "")
	wantRefused(t, c.cli(t, nil, "exec", "parent", "--epoch", fmt.Sprint(kl.Epoch), "--", "touch", "by-kid"), "stale_epoch", "")
	wantRefused(t, c.cli(t, nil, "exec", "kid", "--", "touch", "no-epoch"), "lease_held", "")
	c.mustCLI(t, "exec", "kid", "--epoch", fmt.Sprint(kl.Epoch), "--", "touch", "by-kid")
	c.mustCLI(t, "exec", "parent", "--epoch", fmt.Sprint(pl.Epoch), "--", "touch", "by-parent")
	c.mustCLI(t, "exec", "parent", "--epoch", fmt.Sprint(pl.Epoch), "--", "test", "!", "-e", "by-kid")
	c.mustCLI(t, "exec", "kid", "--epoch", fmt.Sprint(kl.Epoch), "--", "test", "!", "-e", "by-parent")

	// Two children made at once: two workspaces, two allocations, and leases on both at once,
	// each with an epoch of its own.
	twins := []*bgCLI{
		c.startCLI(t, "workspace", "create", "--from", "parent", "--name", "twin-1", "--json"),
		c.startCLI(t, "workspace", "create", "--from", "parent", "--name", "twin-2", "--json"),
	}
	epochs := map[uint64]string{pl.Epoch: "parent", kl.Epoch: "kid"}
	allocs := map[string]bool{parent.AllocationID: true, kid.AllocationID: true, named.AllocationID: true}
	for i, b := range twins {
		r := b.wait(t)
		if r.Code != 0 {
			t.Fatalf("twin-%d: %+v", i+1, r)
		}
		w := decodeWorkspace(t, r.Stdout)
		if w.State != api.StateReady || allocs[w.AllocationID] || w.Parent == nil || w.Parent.Snapshot != snap.ID {
			t.Fatalf("twin-%d: %+v; want ready on an allocation of its own, from %s", i+1, w, snap.ID)
		}
		allocs[w.AllocationID] = true
		l := c.acquire(t, w.Name, "--holder", "agent-"+w.Name, "--ttl", "5m")
		if other, dup := epochs[l.Epoch]; dup || l.WorkspaceID != w.ID {
			t.Fatalf("lease of %s: %+v; epoch already %s's", w.Name, l, other)
		}
		epochs[l.Epoch] = w.Name
	}
}

// --wait-for-save waits, holding nothing, for the parent's next receipt — a snapshot, or a
// close's save — and continues from it; a parent that closed, or went, ends the wait with a
// refusal; a writer of the parent from before its close stays fenced after its reopen.
func TestChildWaitsForTheParentsSave(t *testing.T) {
	c := startController(t, serveOpts{})
	parent := c.createWorkspace(t, "--name", "parent")
	c.mustCLI(t, "exec", "parent", "--", "sh", "-c", "echo one > a.txt")
	first := c.snapshot(t, "parent")
	c.mustCLI(t, "exec", "parent", "--", "sh", "-c", "echo two > a.txt")

	waiter := c.startCLI(t, "workspace", "create", "--from", "parent", "--wait-for-save", "--name", "waiter", "--json")
	c.waitRegistered(t, "parent", "waiter")
	waiter.running(t, "before the parent saved")
	if names := c.workspaceNames(t); len(names) != 1 {
		t.Fatalf("a waiting child made workspaces: %v", names)
	}
	second := c.snapshot(t, "parent")
	r := waiter.wait(t)
	if r.Code != 0 {
		t.Fatalf("create --wait-for-save: %+v", r)
	}
	w := decodeWorkspace(t, r.Stdout)
	if w.Parent == nil || w.Parent.Snapshot != second.ID || second.ID == first.ID {
		t.Fatalf("the waiting child continues %+v; want the new receipt %s (not %s)", w.Parent, second.ID, first.ID)
	}
	if got := c.mustCLI(t, "exec", "waiter", "--", "cat", "a.txt"); got != "two\n" {
		t.Fatalf("the waiting child's a.txt: %q", got)
	}

	// A close's save is a save: the child continues what the close saved.
	pl := c.acquire(t, "parent", "--holder", "old-writer", "--ttl", "10m")
	c.mustCLI(t, "exec", "parent", "--epoch", fmt.Sprint(pl.Epoch), "--", "sh", "-c", "echo three > a.txt")
	closer := c.startCLI(t, "workspace", "create", "--from", "parent", "--wait-for-save", "--name", "at-close", "--json")
	c.waitRegistered(t, "parent", "at-close")
	closer.running(t, "before the parent closed")
	var closed api.CloseResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "close", "parent", "--json")), &closed); err != nil || closed.Snapshot == nil {
		t.Fatalf("close: %+v, %v", closed, err)
	}
	r = closer.wait(t)
	if r.Code != 0 {
		t.Fatalf("create --wait-for-save across a close: %+v", r)
	}
	if w := decodeWorkspace(t, r.Stdout); w.Parent == nil || w.Parent.Snapshot != closed.Snapshot.ID {
		t.Fatalf("the child continues %+v; want the close's receipt %s", w.Parent, closed.Snapshot.ID)
	}
	if got := c.mustCLI(t, "exec", "at-close", "--", "cat", "a.txt"); got != "three\n" {
		t.Fatalf("the child of the close's save has a.txt %q", got)
	}

	// Closed: no writer will save; refused at once, with the receipt to use instead.
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "parent", "--wait-for-save", "--name", "late"), "conflict", closed.Snapshot.ID)
	if _, ok := c.workspaceNames(t)["late"]; ok {
		t.Fatal("a refused wait made a workspace")
	}

	// The writer from before the close stays fenced after the reopen, here and in the child.
	c.mustCLI(t, "workspace", "reopen", "parent")
	wantRefused(t, c.cli(t, nil, "exec", "parent", "--epoch", fmt.Sprint(pl.Epoch), "--", "touch", "stale"), "stale_epoch", "")
	wantRefused(t, c.cli(t, nil, "exec", "at-close", "--epoch", fmt.Sprint(pl.Epoch), "--", "touch", "stale"), "stale_epoch", "")

	// Bounded: no save within the wait is a timeout, and nothing is made.
	wantRefused(t, c.cli(t, nil, "workspace", "create", "--from", "parent", "--wait-for-save", "--wait-timeout", "1s", "--name", "impatient"), "timeout", "no new receipt within 1s")
	if _, ok := c.workspaceNames(t)["impatient"]; ok {
		t.Fatal("a timed-out wait made a workspace")
	}

	// The parent removed while a child waits: the wait ends, refused.
	orphan := c.startCLI(t, "workspace", "create", "--from", "parent", "--wait-for-save", "--name", "orphan")
	c.waitRegistered(t, parent.ID, "orphan")
	c.mustCLI(t, "workspace", "rm", "parent")
	wantRefused(t, orphan.wait(t), "conflict", "is deleted")
	if _, ok := c.workspaceNames(t)["orphan"]; ok {
		t.Fatal("the wait on a removed parent made a workspace")
	}
}

// A project workspace's child continues its Git state on a branch of its own (tether/NAME, or
// --branch), moved inside the sandbox; the parent stays on its branch.
func TestChildOfAProjectWorkspace(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir)
	c.createWorkspace(t, "--project", p.Name, "--name", "pw")
	c.mustCLI(t, "exec", "pw", "--", "sh", "-c", "echo wip > wip.txt")
	c.snapshot(t, "pw")
	head := c.wsGit(t, "pw", "rev-parse", "HEAD")

	for _, tc := range []struct{ name, branch string }{{"pkid", ""}, {"pkid-named", "feature/x"}} {
		args := []string{"workspace", "create", "--from", "pw", "--name", tc.name, "--json"}
		want := "tether/" + tc.name
		if tc.branch != "" {
			args, want = append(args, "--branch", tc.branch), tc.branch
		}
		w := decodeWorkspace(t, c.mustCLI(t, args...))
		if w.Git == nil || w.Git.Branch != want || w.Git.ProjectID != p.ID {
			t.Fatalf("%s git record: %+v; want branch %s", tc.name, w.Git, want)
		}
		in := c.inspect(t, tc.name)
		if in.Branch != want || in.Head != head || in.Untracked != 1 {
			t.Fatalf("%s inspect: %+v; want %s at %s with wip.txt untracked", tc.name, in, want, head)
		}
	}
	if got := c.wsGit(t, "pw", "rev-parse", "--abbrev-ref", "HEAD"); got != "tether/pw" {
		t.Fatalf("the parent moved to %q", got)
	}
	// A branch the receipt already has: the child fails after its restore and is removed.
	c.wsGit(t, "pw", "branch", "taken")
	c.snapshot(t, "pw")
	if r := c.cli(t, nil, "workspace", "create", "--from", "pw", "--name", "clash", "--branch", "taken"); r.Code == 0 {
		t.Fatalf("a child onto a branch its receipt has: %+v", r)
	}
	if w, ok := c.workspaceNames(t)["clash"]; ok && w.State != api.StateDeleted {
		t.Fatalf("a failed child was left: %+v", w)
	}
}
