package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// pullJSON is the part of workspace pull --json the tests read.
type pullJSON struct {
	Changed   int    `json:"changed"`
	NewBase   string `json:"new_base"`
	Applied   int    `json:"applied"`
	Same      int    `json:"same"`
	Conflicts int    `json:"conflicts"`
	Recovery  string `json:"recovery_dir"`
	Items     []struct {
		Path   string `json:"path"`
		Action string `json:"action"`
	} `json:"items"`
	Git *struct {
		Branch    string `json:"branch"`
		Head      string `json:"head"`
		Delivered bool   `json:"delivered"`
		Reason    string `json:"reason"`
	} `json:"git"`
}

func parsePull(t *testing.T, r result) pullJSON {
	t.Helper()
	var p pullJSON
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		t.Fatalf("workspace pull --json printed %q (stderr %q): %v", r.Stdout, r.Stderr, err)
	}
	return p
}

func (p pullJSON) actions() map[string]string {
	m := map[string]string{}
	for _, it := range p.Items {
		m[it.Path] = it.Action
	}
	return m
}

// agentGit is a shell prefix for git inside a workspace: an identity, and the workspace's own
// repository trusted whoever owns it.
const agentGit = "export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=a@t.invalid GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=a@t.invalid HOME=/tmp; g() { git -c safe.directory='*' \"$@\"; }; "

func hostText(t *testing.T, p string) string {
	t.Helper()
	return string(readHost(t, p))
}

// A workspace made from a host checkout brings its work back: changes the host did not make are
// applied (bytes, a mode, a symlink, an added directory, removals), paths both changed are
// conflicts whose other version is kept in the recovery directory, the host's own edits stay,
// and the agent's two commits arrive as branch tether/<name> without moving the host's HEAD,
// index or branch. An unchanged workspace reads nothing on the host.
func TestWorkspacePull(t *testing.T) {
	c := startController(t, serveOpts{})
	host := filepath.Join(t.TempDir(), "checkout")
	files := map[string]string{
		"keep.txt": "keep\n", "edit-ws.txt": "base\n", "edit-both.txt": "base\n", "edit-same.txt": "base\n",
		"del-ws.txt": "gone\n", "del-conflict.txt": "base\n", "run.sh": "echo hi\n", "dir/nested.txt": "nested\n",
	}
	for p, data := range files {
		mustWrite(t, filepath.Join(host, p), []byte(data), 0o644)
	}
	gitIn(t, host, "init", "-q", "-b", "main")
	gitIn(t, host, "add", "-A")
	gitIn(t, host, "commit", "-q", "-m", "base")
	hostHead := gitIn(t, host, "rev-parse", "HEAD")

	ws := c.createWorkspace(t, "--name", "agent1", "--source", host)
	if ws.SourceDir != host || ws.SourceBase == "" {
		t.Fatalf("a --source workspace records its source and base: %+v", ws)
	}

	// Unchanged: nothing on the host is looked at, not even a path a plan would refuse.
	if err := os.Rename(filepath.Join(host, "dir"), filepath.Join(host, "dir.moved")); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, t.TempDir(), filepath.Join(host, "dir"))
	if p := parsePull(t, c.cli(t, nil, "workspace", "pull", "agent1", "--json")); p.Changed != 0 || len(p.Items) != 0 || p.Git != nil {
		t.Fatalf("an unchanged workspace's pull: %+v", p)
	}
	os.Remove(filepath.Join(host, "dir"))
	if err := os.Rename(filepath.Join(host, "dir.moved"), filepath.Join(host, "dir")); err != nil {
		t.Fatal(err)
	}

	// The agent's work: two commits, then uncommitted changes on top.
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", agentGit+`set -e
		echo agent > edit-ws.txt; echo agent > edit-both.txt; echo same > edit-same.txt
		g add -A; g commit -q -m one
		rm del-ws.txt del-conflict.txt; chmod 755 run.sh; mkdir -p new/deep; echo fresh > new/deep/file.txt
		ln -s keep.txt link; g add -A; g commit -q -m two
		echo uncommitted > edit-ws.txt`)
	agentHead := strings.TrimSpace(c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", agentGit+"g rev-parse HEAD"))

	// The host's own edits meanwhile.
	mustWrite(t, filepath.Join(host, "edit-both.txt"), []byte("host\n"), 0o644)
	mustWrite(t, filepath.Join(host, "edit-same.txt"), []byte("same\n"), 0o644)
	mustWrite(t, filepath.Join(host, "del-conflict.txt"), []byte("host kept this\n"), 0o644)
	mustWrite(t, filepath.Join(host, "host-only.txt"), []byte("mine\n"), 0o644)

	// Dry run: the plan, and nothing written.
	before := describeCopy(t, host)
	dry := parsePull(t, c.cli(t, nil, "workspace", "pull", "agent1", "--dry-run", "--json"))
	want := map[string]string{
		"edit-ws.txt": "apply", "edit-both.txt": "conflict", "edit-same.txt": "same", "del-ws.txt": "apply",
		"del-conflict.txt": "conflict", "run.sh": "apply", "new": "apply", "new/deep": "apply", "new/deep/file.txt": "apply", "link": "apply",
	}
	got := dry.actions()
	for p, a := range want {
		if got[p] != a {
			t.Errorf("plan for %s: %q, want %q (plan %v)", p, got[p], a, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("plan has %d paths, want %d: %v", len(got), len(want), got)
	}
	sameCopy(t, "the host after a dry run", before, describeCopy(t, host))

	recovery := filepath.Join(t.TempDir(), "recovery")
	r := c.cli(t, nil, "workspace", "pull", "agent1", "--json", "--recovery-dir", recovery)
	if r.Code != 40 {
		t.Fatalf("a pull with conflicts exits 40, got %+v", r)
	}
	p := parsePull(t, r)
	if p.Conflicts != 2 || p.Applied != 7 || p.Recovery != recovery {
		t.Errorf("pull report: %+v", p)
	}
	for path, data := range map[string]string{
		"edit-ws.txt": "uncommitted\n", "edit-both.txt": "host\n", "edit-same.txt": "same\n", "del-conflict.txt": "host kept this\n",
		"new/deep/file.txt": "fresh\n", "host-only.txt": "mine\n", "keep.txt": "keep\n", "dir/nested.txt": "nested\n",
	} {
		if got := hostText(t, filepath.Join(host, path)); got != data {
			t.Errorf("host %s: %q, want %q", path, got, data)
		}
	}
	if _, err := os.Lstat(filepath.Join(host, "del-ws.txt")); !os.IsNotExist(err) {
		t.Errorf("del-ws.txt is still on the host: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(host, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh's mode: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(host, "link")); err != nil || target != "keep.txt" {
		t.Errorf("link: %q %v", target, err)
	}
	if got := hostText(t, filepath.Join(recovery, "edit-both.txt")); got != "agent\n" {
		t.Errorf("the workspace's version of a conflict in the recovery directory: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(recovery, "del-conflict.txt")); !os.IsNotExist(err) {
		t.Errorf("a conflict whose workspace side is a removal keeps nothing: %v", err)
	}
	ents, _ := os.ReadDir(host)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tether-tmp-") {
			t.Errorf("the pull left %s in the host directory", e.Name())
		}
	}

	// Git: the branch, HEAD and index as they were.
	if p.Git == nil || !p.Git.Delivered || p.Git.Branch != "tether/agent1" || p.Git.Head != agentHead {
		t.Fatalf("git delivery: %+v", p.Git)
	}
	if got := gitIn(t, host, "log", "--format=%s", "tether/agent1"); got != "two\none\nbase" {
		t.Errorf("git log tether/agent1: %q", got)
	}
	if got := gitIn(t, host, "rev-parse", "HEAD"); got != hostHead {
		t.Errorf("the host's HEAD moved: %s", got)
	}
	if got := gitIn(t, host, "symbolic-ref", "--short", "HEAD"); got != "main" {
		t.Errorf("the host's branch: %s", got)
	}
	if got := gitIn(t, host, "diff", "--cached", "--name-only"); got != "" {
		t.Errorf("the host's index changed: %q", got)
	}
	gitIn(t, host, "fsck", "--strict")
	status := gitIn(t, host, "status", "--porcelain")
	for _, line := range []string{" M edit-ws.txt", " D del-ws.txt", " M run.sh", "?? new/", "?? link", "?? host-only.txt"} {
		if !strings.Contains(status, line) {
			t.Errorf("git status lacks %q:\n%s", line, status)
		}
	}

	// Again: what was applied is the same now; the conflicts remain until chosen.
	again := c.cli(t, nil, "workspace", "pull", "agent1", "--json", "--recovery-dir", recovery+"2")
	if pa := parsePull(t, again); again.Code != 40 || pa.Applied != 0 || pa.Conflicts != 2 || pa.Same != 8 {
		t.Errorf("a second pull: exit %d %+v", again.Code, pa)
	}
	r = c.cli(t, nil, "workspace", "pull", "agent1", "--theirs", "--json", "--recovery-dir", recovery+"4")
	if r.Code != 0 {
		t.Fatalf("--theirs: %+v", r)
	}
	if got := hostText(t, filepath.Join(host, "edit-both.txt")); got != "agent\n" {
		t.Errorf("--theirs: edit-both.txt is %q", got)
	}
	if _, err := os.Lstat(filepath.Join(host, "del-conflict.txt")); !os.IsNotExist(err) {
		t.Errorf("--theirs keeps the workspace's removal: %v", err)
	}
	for path, data := range map[string]string{"edit-both.txt": "host\n", "del-conflict.txt": "host kept this\n"} {
		if got := hostText(t, filepath.Join(recovery+"4", path)); got != data {
			t.Errorf("--theirs keeps the host's %s in the recovery directory: %q", path, got)
		}
	}
	// A settled pull moves the base: the agent editing a pulled file again is no conflict, and
	// an unchanged workspace is nothing to do, whatever the host did since.
	settledAt := parsePull(t, r).NewBase
	if got := c.showWorkspace(t, ws.ID).SourceBase; settledAt == "" || got != settledAt {
		t.Fatalf("the base after a settled pull: %q, report %q", got, settledAt)
	}
	mustWrite(t, filepath.Join(host, "keep.txt"), []byte("host edit after the pull\n"), 0o644)
	if p := parsePull(t, c.cli(t, nil, "workspace", "pull", "agent1", "--json")); p.Changed != 0 {
		t.Errorf("a pull of an unchanged workspace after a settled one: %+v", p)
	}
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo again > edit-ws.txt; echo ws-side > edit-same.txt")
	mustWrite(t, filepath.Join(host, "edit-same.txt"), []byte("host-side\n"), 0o644)
	r = c.cli(t, nil, "workspace", "pull", "agent1", "--json", "--ours", "--recovery-dir", recovery+"5")
	if p := parsePull(t, r); r.Code != 0 || p.Applied != 1 || p.Conflicts != 1 || p.actions()["edit-ws.txt"] != "apply" {
		t.Errorf("a pull after a settled one, --ours: exit %d %+v", r.Code, p)
	}
	for path, data := range map[string]string{"edit-ws.txt": "again\n", "edit-same.txt": "host-side\n", "keep.txt": "host edit after the pull\n"} {
		if got := hostText(t, filepath.Join(host, path)); got != data {
			t.Errorf("after --ours: %s is %q, want %q", path, got, data)
		}
	}
	if got := hostText(t, filepath.Join(recovery+"5", "edit-same.txt")); got != "ws-side\n" {
		t.Errorf("--ours keeps the workspace's version in the recovery directory: %q", got)
	}

	// The base stays whatever removes receipts: rm refuses it, prune keeps it, and a closed
	// workspace's gc keeps it, so the closed workspace's work still comes back (files from its
	// last receipt; no runner to read commits from, so none are asked for when HEAD is the same).
	c.mustCLI(t, "snapshot", "create", "agent1") // so the base is not also the newest receipt
	expectCLIError(t, c.cli(t, nil, "snapshot", "rm", c.showWorkspace(t, ws.ID).SourceBase), protocol.CodeConflict, "snapshot rm of a source base")
	c.mustCLI(t, "snapshot", "prune", "agent1", "--keep-last", "1")
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo after > late.txt")
	c.mustCLI(t, "workspace", "close", "agent1")
	c.mustCLI(t, "gc", "--grace", "0s")
	r = c.cli(t, nil, "workspace", "pull", "agent1", "--json")
	if p := parsePull(t, r); r.Code != 0 || p.Applied != 1 || p.actions()["late.txt"] != "apply" {
		t.Fatalf("a closed workspace's pull after prune and gc: exit %d %+v (%s)", r.Code, p, r.Stderr)
	}
	if got := hostText(t, filepath.Join(host, "late.txt")); got != "after\n" {
		t.Errorf("late.txt: %q", got)
	}
}

// The brief's cases: a host parent replaced by a file, by a symlink to a directory outside, or
// missing, refuses the whole pull before any host write (even where the nested file itself needs
// nothing); the host's bytes and the outside directory are intact. A second pull into a
// directory another holds is refused, never interleaved.
func TestWorkspacePullRefusesChangedHostParents(t *testing.T) {
	c := startController(t, serveOpts{})
	host := filepath.Join(t.TempDir(), "checkout")
	for _, p := range []string{"a/one.txt", "b/two.txt", "c/three.txt", "top.txt"} {
		mustWrite(t, filepath.Join(host, p), []byte("base\n"), 0o644)
	}
	ws := c.createWorkspace(t, "--name", "agent2", "--source", host)
	// A first pull with a conflict leaves evidence: the workspace's version in a recovery directory.
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo ws > top.txt")
	mustWrite(t, filepath.Join(host, "top.txt"), []byte("host\n"), 0o644)
	evidence := filepath.Join(t.TempDir(), "evidence")
	if r := c.cli(t, nil, "workspace", "pull", "agent2", "--recovery-dir", evidence); r.Code != 40 {
		t.Fatalf("the first pull: %+v", r)
	}
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "echo ws > a/one.txt; echo ws > b/two.txt; echo ws > c/three.txt")

	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "two.txt"), []byte("outside\n"), 0o644)
	cases := []struct {
		name          string
		break_, mend  func()
		wantInMessage string
	}{
		{"file", func() {
			os.Rename(filepath.Join(host, "a"), filepath.Join(host, "a.saved"))
			mustWrite(t, filepath.Join(host, "a"), []byte("a file now\n"), 0o644)
		}, func() {
			os.Remove(filepath.Join(host, "a"))
			os.Rename(filepath.Join(host, "a.saved"), filepath.Join(host, "a"))
		}, "host parent a of a/one.txt is a file"},
		{"symlink", func() {
			os.Rename(filepath.Join(host, "b"), filepath.Join(host, "b.saved"))
			mustSymlink(t, outside, filepath.Join(host, "b"))
		}, func() {
			os.Remove(filepath.Join(host, "b"))
			os.Rename(filepath.Join(host, "b.saved"), filepath.Join(host, "b"))
		}, "host parent b of b/two.txt is a symlink"},
		{"missing", func() {
			os.Rename(filepath.Join(host, "c"), filepath.Join(t.TempDir(), "c"))
		}, nil, "host parent c of c/three.txt is missing"},
	}
	for _, tc := range cases {
		tc.break_()
		before := describeCopy(t, host)
		r := c.cli(t, nil, "workspace", "pull", "agent2")
		expectCLIError(t, r, protocol.CodeConflict, "pull with a "+tc.name+" parent")
		if !strings.Contains(r.Stderr, tc.wantInMessage) || !strings.Contains(r.Stderr, "nothing was written") {
			t.Errorf("%s: stderr %q", tc.name, r.Stderr)
		}
		sameCopy(t, "the host after a refused pull ("+tc.name+")", before, describeCopy(t, host))
		if got := hostText(t, filepath.Join(outside, "two.txt")); got != "outside\n" {
			t.Fatalf("the directory outside changed: %q", got)
		}
		if got := hostText(t, filepath.Join(evidence, "top.txt")); got != "ws\n" {
			t.Fatalf("the recovery evidence after a refused pull: %q", got)
		}
		if tc.mend != nil {
			tc.mend()
		}
	}

	// Another pull holds the directory: refused, nothing written.
	fd, err := unix.Open(host, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	before := describeCopy(t, host)
	r := c.cli(t, nil, "workspace", "pull", "agent2", "--to", host)
	expectCLIError(t, r, protocol.CodeConflict, "a pull into a held directory")
	sameCopy(t, "the host while another pull holds it", before, describeCopy(t, host))
	unix.Close(fd)

	// With the parents mended (c recreated empty is a directory again), the pull applies.
	if err := os.Mkdir(filepath.Join(host, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = c.cli(t, nil, "workspace", "pull", "agent2", "--json", "--recovery-dir", t.TempDir())
	p := parsePull(t, r)
	if r.Code != 40 || p.Applied != 2 || p.Conflicts != 2 || p.actions()["c/three.txt"] != "conflict" || p.actions()["top.txt"] != "conflict" {
		t.Fatalf("the mended pull: exit %d %+v", r.Code, p)
	}
	if got := hostText(t, filepath.Join(host, "top.txt")); got != "host\n" {
		t.Errorf("the host's top.txt: %q", got)
	}
	for _, f := range []string{"a/one.txt", "b/two.txt"} {
		if got := hostText(t, filepath.Join(host, f)); got != "ws\n" {
			t.Errorf("%s after the mended pull: %q", f, got)
		}
	}
}

// A project workspace's pull delivers its branch to the project's source: a ref the source has
// not checked out, its HEAD, index and files untouched; what is not committed is counted and
// stays in the workspace; delivery is what inspect says, and merged once the source merges it.
func TestWorkspacePullProject(t *testing.T) {
	c := startController(t, serveOpts{})
	src := newSourceRepo(t)
	srcHead := src.git("rev-parse", "HEAD")
	p := c.createProject(t, "--source", src.Dir)
	ws := c.createWorkspace(t, "--project", p.ID, "--name", "task")
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", agentGit+"set -e; echo work > work.txt; g add work.txt; g commit -q -m work; echo wip > wip.txt")
	head := strings.TrimSpace(c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", agentGit+"g rev-parse HEAD"))

	var rep struct {
		Git struct {
			Branch    string `json:"branch"`
			Head      string `json:"head"`
			Delivered bool   `json:"delivered"`
		} `json:"git"`
		Uncommitted int    `json:"uncommitted"`
		Delivery    string `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(c.mustCLI(t, "workspace", "pull", "task", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Git.Delivered || rep.Git.Head != head || rep.Git.Branch != ws.Git.Branch || rep.Uncommitted != 1 || rep.Delivery != "unmerged" {
		t.Fatalf("project pull: %+v", rep)
	}
	if got := src.git("rev-parse", ws.Git.Branch); got != head {
		t.Errorf("the source's %s: %s, want %s", ws.Git.Branch, got, head)
	}
	if got := src.git("rev-parse", "HEAD"); got != srcHead {
		t.Errorf("the source's HEAD moved: %s", got)
	}
	if got := src.git("status", "--porcelain"); got != "" {
		t.Errorf("the source's files changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(src.Dir, "work.txt")); !os.IsNotExist(err) {
		t.Errorf("a project pull wrote a file into the source's worktree: %v", err)
	}
	src.git("merge", "-q", "--ff-only", ws.Git.Branch)
	if in := c.inspect(t, ws.ID); in.Delivery != api.DeliveredByAncestry {
		t.Errorf("after the source merged the branch: %+v", in)
	}
	// Again: nothing to move, still delivered.
	c.mustCLI(t, "workspace", "pull", "task")
}

// What a workspace writes into a .git — at any depth, in any letter case — never reaches the
// host as files, nor do names reserved for Tether's temporaries (an agent making one does not
// block the rest); a host directory that is no repository gets no commits, even when the
// workspace lays out a bare repository's files at its top with symlinks to another repository.
func TestWorkspacePullNeverCarriesGitState(t *testing.T) {
	c := startController(t, serveOpts{})
	host := filepath.Join(t.TempDir(), "plain")
	mustWrite(t, filepath.Join(host, "a.txt"), []byte("base\n"), 0o644)
	victim := filepath.Join(t.TempDir(), "victim")
	gitIn(t, t.TempDir(), "init", "-q", victim)
	ws := c.createWorkspace(t, "--name", "agent3", "--source", host)
	c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", agentGit+`set -e
		echo ws > a.txt
		mkdir -p sub/.git vendor/x/.GIT; echo '[core] fsmonitor = touch /tmp/pwned' > sub/.git/config; echo x > vendor/x/.GIT/config
		echo 'gitdir: ../evil' > vendor/.git; touch .tether-tmp-blocker
		g init -q inner; echo 'ref: refs/heads/main' > HEAD; mkdir refs; ln -s `+victim+`/.git/objects objects
		g -C inner commit -q --allow-empty -m x`)
	r := c.cli(t, nil, "workspace", "pull", "agent3", "--json")
	p := parsePull(t, r)
	if r.Code != 0 || p.actions()["a.txt"] != "apply" {
		t.Fatalf("pull: exit %d %+v %s", r.Code, p, r.Stderr)
	}
	var skipped struct {
		Skipped struct {
			Count int      `json:"count"`
			Paths []string `json:"paths"`
		} `json:"skipped"`
	}
	json.Unmarshal([]byte(r.Stdout), &skipped)
	if skipped.Skipped.Count < 5 {
		t.Errorf("skipped: %+v", skipped.Skipped)
	}
	for path := range p.actions() {
		if strings.Contains(strings.ToLower(path), ".git") || strings.Contains(path, ".tether-tmp-") {
			t.Errorf("the plan carries %s", path)
		}
	}
	for _, path := range []string{"sub/.git", "vendor/x/.GIT", "vendor/.git", ".tether-tmp-blocker", "inner/.git"} {
		if _, err := os.Lstat(filepath.Join(host, path)); !os.IsNotExist(err) {
			t.Errorf("%s reached the host: %v", path, err)
		}
	}
	if got := gitIn(t, victim, "for-each-ref"); got != "" {
		t.Errorf("the other repository got refs: %q", got)
	}
}
