package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// hostileGitSetup is what an agent writes into its workspace's repository so that any git run on
// it, or on a repository sharing its config, runs a command: each writes a marker under dir on
// the host. url.insteadOf sends a fetch of the project's source to ssh, whose core.sshCommand
// writes "ssh"; core.fsmonitor writes "fsmonitor" on any status; hooks write "hook-NAME";
// the filter x (named by info/attributes here, or a committed .gitattributes) writes "filter".
func hostileGitSetup(dir, source string) string {
	m := func(name string) string { return shq(filepath.Join(dir, name)) }
	lines := []string{
		"set -e",
		"git config --local url.ssh://tether-attack.invalid/x.insteadOf " + shq(source),
		"git config --local core.sshCommand " + shq("sh -c 'echo ssh >> "+filepath.Join(dir, "ssh")+"'; false #"),
		"git config --local core.fsmonitor " + shq("echo fsmonitor >> "+filepath.Join(dir, "fsmonitor")+"; false #"),
		"git config --local filter.x.clean " + shq("echo clean >> "+filepath.Join(dir, "filter")+"; cat"),
		"git config --local filter.x.smudge " + shq("echo smudge >> "+filepath.Join(dir, "filter")+"; cat"),
		// Where git itself looks: in a worktree these would be the shared repository's.
		`H=$(git rev-parse --git-path hooks) A=$(git rev-parse --git-path info/attributes)`,
		`mkdir -p "$H" "$(dirname "$A")"`,
		`printf '* filter=x\n' > "$A"`,
	}
	for _, h := range []string{"post-checkout", "post-merge", "pre-push", "reference-transaction", "post-index-change",
		"pre-auto-gc", "post-rewrite", "pre-commit", "post-commit", "fsmonitor-watchman"} {
		lines = append(lines, "printf '#!/bin/sh\\necho %s >> %s\\n' "+h+" "+m("hook-"+h)+` > "$H/`+h+`"`, `chmod +x "$H/`+h+`"`)
	}
	return strings.Join(lines, "\n")
}

// What a local project workspace's agent writes into its repository's config, hooks and
// attributes never runs on the controller's host, and the controller's Git operations on the
// project still work: inspect, reconcile, snapshot, close, gc, reopen. DESIGN.md safety contract
// 7: "nothing on the controller's host ever runs or parses as config what a workspace wrote
// (Git config, hooks, attributes)". The workspace's repository is its own (never a worktree of
// the base clone, whose config it would share) and is read and moved only by its runner; every
// git the controller runs is on the base clone, with hooks, fsmonitor and outside config off.
func TestProjectHostGitNeverRunsWorkspaceConfig(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir)
	base := filepath.Join(c.Data, "projects", p.ID, "base.git")
	baseConfig, err := os.ReadFile(filepath.Join(base, "config"))
	if err != nil {
		t.Fatal(err)
	}
	markers := t.TempDir() // on the host; nothing may ever write here
	noMarkers := func(after string) {
		t.Helper()
		if ents, _ := os.ReadDir(markers); len(ents) > 0 {
			var got []string
			for _, e := range ents {
				b, _ := os.ReadFile(filepath.Join(markers, e.Name()))
				got = append(got, e.Name()+": "+strings.TrimSpace(string(b)))
			}
			t.Fatalf("after %s, the host ran what a workspace wrote: %v", after, got)
		}
	}

	// ff: the attributes come from .git/info/attributes and the tree stays clean, so a
	// reconcile fast-forwards (a checkout: smudge filter, post-checkout and
	// reference-transaction hooks, had git done it). committed: a .gitattributes committed
	// before the filter was configured; the branch is ahead, so its reconcile only reports.
	ff := c.createWorkspace(t, "--project", p.ID, "--name", "ff")
	committed := c.createWorkspace(t, "--project", p.ID, "--name", "committed")
	c.mustCLI(t, "exec", committed.ID, "--", "sh", "-c",
		"printf '* filter=x\\n' > .gitattributes && git add .gitattributes && git -c user.name=A -c user.email=a@example.com commit -q -m attrs")
	for _, ws := range []api.Workspace{ff, committed} {
		c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", hostileGitSetup(markers, src.Dir))
		if got := strings.TrimSpace(c.mustCLI(t, "exec", ws.ID, "--", "git", "config", "--local", "core.sshCommand")); !strings.Contains(got, "echo ssh") {
			t.Fatalf("%s: the agent's config did not take: %q", ws.Name, got)
		}
		// The repository is the workspace's own: its config is not the base clone's.
		if fi, err := os.Lstat(filepath.Join(ws.Root, ".git")); err != nil || !fi.IsDir() {
			t.Fatalf("%s: .git is not a directory of the workspace's own: %v", ws.Name, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(base, "config")); string(got) != string(baseConfig) {
		t.Fatalf("a workspace's git config reached the base clone:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(base, "worktrees")); !os.IsNotExist(err) {
		t.Fatalf("the base clone has worktrees: %v", err)
	}

	// Promise: inspect reads the workspace through its runner and fetches the source into the
	// base clone alone — the insteadOf/sshCommand, fsmonitor and hooks are never run.
	inFF, inCommitted := c.inspect(t, ff.ID), c.inspect(t, committed.ID)
	noMarkers("inspect")
	if inFF.Source != "live" || inFF.Ahead != 0 || inFF.Delivery != api.DeliveredByAncestry {
		t.Fatalf("inspect ff: %+v", inFF)
	}
	if inCommitted.Source != "live" || inCommitted.Ahead != 1 || inCommitted.Delivery != api.Unmerged {
		t.Fatalf("inspect committed: %+v", inCommitted)
	}

	// Promise: reconcile fetches into the base clone, streams a pack, and the runner moves the
	// branch with go-git — no filter, no post-checkout or reference-transaction hook runs.
	next := src.advance("later.txt", "later\n")
	var rec api.ReconcileResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", ff.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "fast_forwarded" || rec.After != next {
		t.Fatalf("reconcile ff: %+v", rec)
	}
	if got := c.mustCLI(t, "files", "get", ff.ID, "later.txt"); got != "later\n" {
		t.Fatalf("later.txt after the fast-forward = %q", got)
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", committed.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "diverged" || rec.Ahead != 1 || rec.Behind != 1 {
		t.Fatalf("reconcile committed: %+v", rec)
	}
	noMarkers("reconcile")

	// Promise: a snapshot captures the repository (config and hooks included, as files) without
	// running any of it.
	for _, ws := range []api.Workspace{ff, committed} {
		c.snapshot(t, ws.ID)
	}
	noMarkers("snapshot create")
	// An ignored file changed since, so close saves a second receipt and gc has one to reclaim.
	c.mustCLI(t, "exec", ff.ID, "--", "sh", "-c", "echo later > .provisioned")

	// Promise: close, inspect from the receipt, and a gc sweep (which removes the base clone no
	// open workspace uses) run nothing of the workspace's.
	for _, ws := range []api.Workspace{ff, committed} {
		c.mustCLI(t, "workspace", "close", ws.ID)
	}
	if in := c.inspect(t, ff.ID); in.Source != "saved" || in.Head != next {
		t.Fatalf("inspect of the closed ff: %+v", in)
	}
	res := c.gc(t, "--grace", "0s")
	if cand := candidate(res, ff.ID); cand == nil || !cand.Reclaimed {
		t.Fatalf("gc: %+v", res)
	}
	noMarkers("close and gc")

	// Promise: reopened from its receipt (hooks and config restored with it) the workspace is
	// still only read and moved by its runner; the base clone is cloned again untouched.
	c.mustCLI(t, "workspace", "reopen", ff.ID)
	if in := c.inspect(t, ff.ID); in.Source != "live" || in.Head != next || in.Delivery != api.DeliveredByAncestry {
		t.Fatalf("inspect after reopen: %+v", in)
	}
	src.advance("even-later.txt", "x\n")
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", ff.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "fast_forwarded" {
		t.Fatalf("reconcile after reopen: %+v", rec)
	}
	noMarkers("reopen, inspect and reconcile")
	if got, err := os.ReadFile(filepath.Join(base, "config")); err != nil || string(got) != string(baseConfig) {
		t.Fatalf("the base clone's config after reopen: %v\n%s", err, got)
	}

	// Control: the restored repository does run all of it once a host git is run in it — which
	// is what Tether never does. Without this the test above could pass on an inert setup.
	root := c.showWorkspace(t, ff.ID).Root
	host := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", root}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		_ = cmd.Run() // the fetch fails by design (sshCommand exits 1)
	}
	host("status")
	host("fetch", "-q", src.Dir, "main")
	host("checkout", "-q", "-b", "control")
	for _, name := range []string{"ssh", "fsmonitor", "filter", "hook-post-checkout", "hook-reference-transaction"} {
		if _, err := os.Stat(filepath.Join(markers, name)); err != nil {
			t.Errorf("control: host git in the workspace did not run the agent's %s: %v", name, err)
		}
	}
}
