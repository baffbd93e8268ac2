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

// sourceRepo is a real Git repository on disk with one commit on main: the project's source.
type sourceRepo struct {
	t   *testing.T
	Dir string
}

func newSourceRepo(t *testing.T) *sourceRepo {
	t.Helper()
	r := &sourceRepo{t: t, Dir: filepath.Join(t.TempDir(), "source")}
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.git("init", "-q", "-b", "main")
	r.write("README", "v1\n")
	// What provisioning makes is ignored, as build output and dependencies are in real projects.
	r.write(".gitignore", ".provisioned\n")
	r.git("add", ".")
	r.git("commit", "-q", "-m", "first")
	return r
}

func (r *sourceRepo) git(args ...string) string {
	r.t.Helper()
	return gitIn(r.t, r.Dir, args...)
}

func (r *sourceRepo) write(name, data string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.Dir, name), []byte(data), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// advance commits a new file on main.
func (r *sourceRepo) advance(name, data string) string {
	r.write(name, data)
	r.git("add", name)
	r.git("commit", "-q", "-m", "add "+name)
	return r.git("rev-parse", "HEAD")
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (c *controllerProc) createProject(t *testing.T, args ...string) api.Project {
	t.Helper()
	var p api.Project
	if err := json.Unmarshal([]byte(c.mustCLI(t, append([]string{"project", "create", "--json"}, args...)...)), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *controllerProc) inspect(t *testing.T, id string) api.Inspection {
	t.Helper()
	var in api.Inspection
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "inspect", id, "--json")), &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// wsGit runs git inside the workspace, through the runner.
func (c *controllerProc) wsGit(t *testing.T, id string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(c.mustCLI(t, append([]string{"exec", id, "--", "git", "-c", "user.name=T", "-c", "user.email=t@example.com"}, args...)...))
}

func TestProjectIsolatedWorkspaces(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir, "--provision", "echo provisioned-$(pwd) > .provisioned; echo hello-from-provision")
	if p.BaseRef != "main" || p.Mode != api.ModeIsolated || !strings.HasPrefix(p.ID, "prj_") {
		t.Fatalf("project: %+v", p)
	}
	base := filepath.Join(c.Data, "projects", p.ID, "base.git")
	// What the base clone is: every ref, its HEAD and its config. Only the controller writes
	// it: a task's commits live in the task's own repository, never here.
	baseState := func() string {
		refs := gitIn(t, base, "for-each-ref", "--format=%(refname) %(objectname)")
		cfg, err := os.ReadFile(filepath.Join(base, "config"))
		if err != nil {
			t.Fatal(err)
		}
		return refs + "\nHEAD " + gitIn(t, base, "symbolic-ref", "HEAD") + "\n" + string(cfg)
	}
	before := baseState()

	a := c.createWorkspace(t, "--project", p.Name, "--name", "task-a")
	b := c.createWorkspace(t, "--project", p.ID, "--name", "task-b")
	if a.Git == nil || a.Git.Branch != "tether/task-a" || a.Git.Strategy != api.StrategyClone || b.Git.Branch != "tether/task-b" {
		t.Fatalf("workspaces: %+v %+v", a.Git, b.Git)
	}
	if a.Root == b.Root {
		t.Fatal("two isolated workspaces share a root")
	}
	// Each has a repository of its own: .git is a directory, not a worktree of the base clone.
	for _, ws := range []api.Workspace{a, b} {
		if fi, err := os.Lstat(filepath.Join(ws.Root, ".git")); err != nil || !fi.IsDir() {
			t.Fatalf("%s: .git is not a directory of its own: %v", ws.Name, err)
		}
	}
	if wts, _ := os.ReadDir(filepath.Join(base, "worktrees")); len(wts) != 0 {
		t.Fatalf("the base clone has worktrees: %v", wts)
	}
	for _, ws := range []api.Workspace{a, b} {
		if got := c.wsGit(t, ws.ID, "rev-parse", "--abbrev-ref", "HEAD"); got != ws.Git.Branch {
			t.Fatalf("%s is on %q, want %q", ws.Name, got, ws.Git.Branch)
		}
		if got := c.mustCLI(t, "files", "get", ws.ID, "README"); got != "v1\n" {
			t.Fatalf("%s README = %q", ws.Name, got)
		}
		// The provision command ran in the allocation, in the workspace root, and its output is
		// kept with its run.
		if got := c.mustCLI(t, "files", "get", ws.ID, ".provisioned"); !strings.Contains(got, "provisioned-") {
			t.Fatalf("%s .provisioned = %q", ws.Name, got)
		}
		var runs []api.Run
		if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "ls", ws.ID, "--json")), &runs); err != nil {
			t.Fatal(err)
		}
		if len(runs) == 0 || runs[0].Kind != "provision" || !strings.Contains(runs[0].Output, "hello-from-provision") {
			t.Fatalf("%s provision run: %+v", ws.Name, runs)
		}
	}
	// Work in one is not in the other; the base clone's own branch and HEAD never move.
	c.mustCLI(t, "exec", a.ID, "--", "sh", "-c", "echo a-work > a.txt")
	c.wsGit(t, a.ID, "add", "a.txt")
	c.wsGit(t, a.ID, "commit", "-q", "-m", "a work")
	if r := c.cli(t, nil, "files", "stat", b.ID, "a.txt"); r.Code == 0 {
		t.Fatal("task-a's file appeared in task-b")
	}
	if after := baseState(); after != before || gitIn(t, base, "rev-parse", "--is-bare-repository") != "true" {
		t.Fatalf("the base clone was written by a task:\nbefore %s\nafter  %s", before, after)
	}

	// Delivery: unmerged until the source's main contains the work.
	in := c.inspect(t, a.ID)
	if in.Delivery != api.Unmerged || in.Ahead != 1 || in.Branch != "tether/task-a" || in.Source != "live" {
		t.Fatalf("inspect before merge: %+v", in)
	}
	// The workspace's repository belongs to the agent's uid: the operator's git must be told it
	// is trusted, as with any repository of another user (a global setting; git 2.39 ignores it
	// on the command line of the upload-pack it runs).
	trust := filepath.Join(t.TempDir(), "gitconfig")
	if err := os.WriteFile(trust, []byte("[safe]\n\tdirectory = *\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fetch := exec.Command("git", "fetch", "-q", a.Root, "tether/task-a")
	fetch.Dir, fetch.Env = src.Dir, append(os.Environ(), "GIT_CONFIG_GLOBAL="+trust)
	if out, err := fetch.CombinedOutput(); err != nil {
		t.Fatalf("fetch the task's branch: %v\n%s", err, out)
	}
	src.git("merge", "-q", "--ff-only", "FETCH_HEAD")
	if in := c.inspect(t, a.ID); in.Delivery != api.DeliveredByAncestry {
		t.Fatalf("inspect after merge: %+v", in)
	}
	// With the source gone, delivery is unknown and plain reads still work.
	moved := src.Dir + ".away"
	if err := os.Rename(src.Dir, moved); err != nil {
		t.Fatal(err)
	}
	if in := c.inspect(t, a.ID); in.Delivery != api.DeliveryUnknown || in.Reason == "" || in.Head == "" {
		t.Fatalf("inspect with the source unreachable: %+v", in)
	}
	if ws := c.showWorkspace(t, a.ID); ws.State != api.StateReady {
		t.Fatalf("workspace show with the source unreachable: %+v", ws)
	}
	if err := os.Rename(moved, src.Dir); err != nil {
		t.Fatal(err)
	}

	// Reconcile: the clean task-b fast-forwards to the advanced base; a branch with its own
	// commit and an advanced base is diverged and left as it is.
	newBase := src.advance("later.txt", "later\n")
	var rec api.ReconcileResult
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", b.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "fast_forwarded" || rec.After != newBase || rec.BaseCommit != newBase {
		t.Fatalf("reconcile task-b: %+v", rec)
	}
	if got := c.mustCLI(t, "files", "get", b.ID, "later.txt"); got != "later\n" {
		t.Fatalf("task-b later.txt after reconcile = %q", got)
	}
	c.mustCLI(t, "exec", b.ID, "--", "sh", "-c", "echo b-work > b.txt")
	c.wsGit(t, b.ID, "add", "b.txt")
	c.wsGit(t, b.ID, "commit", "-q", "-m", "b work")
	headB := c.wsGit(t, b.ID, "rev-parse", "HEAD")
	src.advance("even-later.txt", "x\n")
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "reconcile", b.ID, "--json")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Action != "diverged" || rec.Ahead != 1 || rec.Behind != 1 || c.wsGit(t, b.ID, "rev-parse", "HEAD") != headB {
		t.Fatalf("reconcile of a branch with unpushed work: %+v", rec)
	}
	if r := c.cli(t, nil, "files", "stat", b.ID, "even-later.txt"); r.Code == 0 {
		t.Fatal("a diverged reconcile changed the tree")
	}
}

func TestProjectProvisionFailure(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir)
	r := c.cli(t, nil, "workspace", "create", "--project", p.ID, "--name", "broken", "--provision", "echo boom-in-the-tail >&2; exit 3")
	if r.Code == 0 || !strings.Contains(r.Stderr, "error: failed:") || !strings.Contains(r.Stderr, "boom-in-the-tail") {
		t.Fatalf("a failing provision: %+v", r)
	}
	ws := c.showWorkspace(t, "broken")
	if ws.State != api.StateFailed || !strings.Contains(ws.Reason, "exited with 3") {
		t.Fatalf("workspace after a failing provision: %+v", ws)
	}
	// Bad input changes nothing.
	for _, args := range [][]string{
		{"project", "create", "--source", filepath.Join(t.TempDir(), "missing")},
		{"project", "create", "--source", src.Dir, "--mode", "sometimes"},
		{"project", "create", "--source", src.Dir, "--base-ref", "no-such-branch"},
		{"workspace", "create", "--project", p.ID, "--branch", "main"},
		{"workspace", "create", "--project", p.ID, "--branch", "-x"},
		{"workspace", "create", "--project", p.ID, "--mode", "operator-branch"},
		{"workspace", "create", "--project", "prj_doesnotexist"},
		{"workspace", "create", "--mode", "shared"},
	} {
		if r := c.cli(t, nil, args...); r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: ") {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	var list []api.Project
	if err := json.Unmarshal([]byte(c.mustCLI(t, "project", "ls", "--json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("projects after refused creates: %+v %v", list, err)
	}
	var wss []api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &wss); err != nil || len(wss) != 1 || wss[0].Name != "broken" {
		t.Fatalf("workspaces after refused creates: %+v %v", wss, err)
	}
	entries, err := os.ReadDir(filepath.Join(c.Data, "projects"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("project dirs after refused creates: %v %v", entries, err)
	}
	// An isolated workspace on a shared workspace's branch is refused before any sandbox starts,
	// with a typed conflict (TestProjectExistingSourceBranch covers the source's own branches).
	p2 := c.createProject(t, "--source", src.Dir, "--name", "again")
	c.createWorkspace(t, "--project", p2.ID, "--mode", "shared", "--branch", "team/x")
	if r := c.cli(t, nil, "workspace", "create", "--project", p2.ID, "--branch", "team/x"); r.Code != 5 || !strings.Contains(r.Stderr, "error: conflict:") {
		t.Fatalf("an isolated workspace on a shared branch: %+v", r)
	}
	if r := c.cli(t, nil, "workspace", "create", "--project", p2.ID, "--mode", "shared", "--branch", "team/x", "--provision", "true"); r.Code != 2 {
		t.Fatalf("reusing a shared workspace with new provision commands: %+v", r)
	}
	// Removing a workspace gives its branch name back.
	ws = c.createWorkspace(t, "--project", p2.ID, "--name", "reuse-me")
	c.mustCLI(t, "workspace", "rm", ws.ID)
	if again := c.createWorkspace(t, "--project", p2.ID, "--name", "reuse-me"); again.Git.Branch != "tether/reuse-me" {
		t.Fatalf("re-created workspace: %+v", again.Git)
	}
}

func TestProjectSharedWorkspace(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir, "--mode", "shared")
	first := c.createWorkspace(t, "--project", p.ID)
	c.mustCLI(t, "exec", first.ID, "--", "sh", "-c", "echo shared-work > s.txt")
	second := c.createWorkspace(t, "--project", p.ID)
	if second.ID != first.ID || second.Git.Branch != "tether/shared" {
		t.Fatalf("the second request got another workspace: %s vs %s", second.ID, first.ID)
	}
	if got := c.mustCLI(t, "files", "get", second.ID, "s.txt"); got != "shared-work\n" {
		t.Fatalf("shared file = %q", got)
	}
	// One writer at a time: a second writer's lease is refused while the first holds it.
	c.mustCLI(t, "lease", "acquire", first.ID, "--holder", "agent-1")
	if r := c.cli(t, nil, "lease", "acquire", second.ID, "--holder", "agent-2"); r.Code == 0 || !strings.Contains(r.Stderr, "lease_held") {
		t.Fatalf("a concurrent writer's lease: %+v", r)
	}
	// Requests racing for the shared branch all get the one workspace.
	results := make(chan string, 4)
	for range 4 {
		go func() {
			r := c.cli(t, nil, "workspace", "create", "--project", p.ID, "--mode", "shared", "--branch", "race/x", "--json")
			var ws api.Workspace
			if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &ws) != nil {
				results <- "failed: " + r.Stderr
				return
			}
			results <- ws.ID
		}()
	}
	var ids []string
	for range 4 {
		ids = append(ids, <-results)
	}
	for _, id := range ids {
		if id != ids[0] || !strings.HasPrefix(id, "ws_") {
			t.Fatalf("concurrent shared requests got %v", ids)
		}
	}
	// An operator branch is its own shared workspace.
	ob := c.createWorkspace(t, "--project", p.ID, "--mode", "operator-branch", "--branch", "ops/fix")
	again := c.createWorkspace(t, "--project", p.ID, "--mode", "operator-branch", "--branch", "ops/fix")
	if ob.ID == first.ID || again.ID != ob.ID || ob.Git.Branch != "ops/fix" {
		t.Fatalf("operator branch workspaces: %s %s (shared %s)", ob.ID, again.ID, first.ID)
	}
}

// Teardown commands run inside the allocation before it is released, and are kept as runs.
func TestProjectTeardownOnClose(t *testing.T) {
	src := newSourceRepo(t)
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir, "--teardown", "echo bye-from-teardown; pwd; ls")
	ws := c.createWorkspace(t, "--project", p.ID)
	c.mustCLI(t, "exec", ws.ID, "--", "touch", "teardown-sees-this")
	c.mustCLI(t, "workspace", "close", ws.ID)
	var runs []api.Run
	if err := json.Unmarshal([]byte(c.mustCLI(t, "run", "ls", ws.ID, "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	var teardown *api.Run
	for i := range runs {
		if runs[i].Kind == "teardown" {
			teardown = &runs[i]
		}
	}
	// It ran in the workspace root (the sandbox's /workspace), before the allocation went.
	if teardown == nil || teardown.State != api.RunExited || !strings.Contains(teardown.Output, "bye-from-teardown") ||
		!strings.Contains(teardown.Output, "/workspace\n") || !strings.Contains(teardown.Output, "teardown-sees-this") {
		t.Fatalf("teardown run: %+v", runs)
	}
	if out := c.mustCLI(t, "run", "show", teardown.ID); !strings.Contains(out, "bye-from-teardown") || !strings.Contains(out, "teardown") {
		t.Fatalf("run show:\n%s", out)
	}
}

// A branch the source already has is checked out at its tip there, whether it was cloned with the
// project or pushed to the source since; one only the base clone still has is refused.
func TestProjectExistingSourceBranch(t *testing.T) {
	src := newSourceRepo(t)
	src.git("branch", "gone")
	src.git("checkout", "-q", "-b", "feature")
	featureTip := src.advance("feature.txt", "feature\n")
	src.git("checkout", "-q", "-b", "rewound")
	src.advance("r1.txt", "r1\n")
	src.advance("r2.txt", "r2\n")
	src.git("checkout", "-q", "main")
	c := startController(t, serveOpts{})
	p := c.createProject(t, "--source", src.Dir)
	base := src.git("rev-parse", "main")
	// The base clone's copy of rewound now has a commit the source's branch does not.
	src.git("branch", "-f", "rewound", "rewound~1")

	// Pushed to the source after the project was created: the base clone never saw it.
	src.git("checkout", "-q", "-b", "later")
	laterTip := src.advance("later.txt", "later\n")
	src.git("checkout", "-q", "main")
	src.git("branch", "-D", "gone")

	ob := c.createWorkspace(t, "--project", p.ID, "--mode", "operator-branch", "--branch", "feature")
	if ob.Git.StartCommit != featureTip || ob.Git.BaseCommit != base || ob.Git.Branch != "feature" {
		t.Fatalf("operator-branch workspace on an existing branch: %+v", ob.Git)
	}
	if got := c.wsGit(t, ob.ID, "rev-parse", "HEAD"); got != featureTip {
		t.Fatalf("HEAD %s, want the source's feature tip %s", got, featureTip)
	}
	if got := c.mustCLI(t, "files", "get", ob.ID, "feature.txt"); got != "feature\n" {
		t.Fatalf("feature.txt = %q", got)
	}
	c.mustCLI(t, "exec", ob.ID, "--", "sh", "-c", "echo more > more.txt")
	c.wsGit(t, ob.ID, "add", "more.txt")
	c.wsGit(t, ob.ID, "commit", "-q", "-m", "more")
	if in := c.inspect(t, ob.ID); in.Ahead != 2 || in.Behind != 0 || in.Delivery != api.Unmerged || in.Branch != "feature" {
		t.Fatalf("inspect of the feature workspace: %+v", in)
	}
	if again := c.createWorkspace(t, "--project", p.ID, "--mode", "operator-branch", "--branch", "feature"); again.ID != ob.ID {
		t.Fatalf("the second operator request got %s, want %s", again.ID, ob.ID)
	}

	iso := c.createWorkspace(t, "--project", p.ID, "--branch", "later")
	if iso.Git.StartCommit != laterTip || c.wsGit(t, iso.ID, "rev-parse", "HEAD") != laterTip {
		t.Fatalf("isolated workspace on a branch pushed since: %+v", iso.Git)
	}

	// The workspaces and their states, not the whole records: usage samples and activity times
	// move on their own between two listings.
	listed := func() string {
		t.Helper()
		var list []api.Workspace
		if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "ls", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, w := range list {
			out = append(out, w.ID+" "+string(w.State)+" "+w.AllocationID)
		}
		return strings.Join(out, "\n")
	}
	before := listed()
	for _, tc := range []struct{ branch, code string }{
		{"gone", "conflict"},                                  // deleted at the source, still in the base clone
		{"rewound", "conflict"},                               // the base clone's holds a commit the source's does not
		{"feature", "conflict"},                               // an open workspace's branch
		{"refs/heads/refs/heads/feature", "invalid_argument"}, // not a second name for it
		{"refs/heads/main", "invalid_argument"},               // the base ref
	} {
		r := c.cli(t, nil, "workspace", "create", "--project", p.ID, "--branch", tc.branch)
		if r.Code == 0 || !strings.Contains(r.Stderr, "error: "+tc.code+": ") {
			t.Fatalf("isolated workspace on %q: want %s, got %+v", tc.branch, tc.code, r)
		}
	}
	if after := listed(); after != before {
		t.Fatalf("a refused request left a workspace:\nbefore %s\nafter  %s", before, after)
	}
}
