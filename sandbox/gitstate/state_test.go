package gitstate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func write(t testing.TB, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func needGit(t testing.TB) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

// fixture builds a repo with a bare origin, two pushed commits, one
// commit on origin that is not local (behind), two unpushed ones (ahead),
// a staged change, an unstaged change and untracked files.
func fixture(t testing.TB) (work string) {
	needGit(t)
	base := t.TempDir()
	origin := filepath.Join(base, "origin.git")
	work = filepath.Join(base, "work")
	runGit(t, base, "init", "-q", "--bare", "-b", "main", origin)
	runGit(t, base, "clone", "-q", origin, work)
	write(t, filepath.Join(work, "a.txt"), "a\n")
	write(t, filepath.Join(work, "b.txt"), "b\n")
	runGit(t, work, "add", ".")
	runGit(t, work, "commit", "-qm", "one")
	write(t, filepath.Join(work, "a.txt"), "a2\n")
	runGit(t, work, "commit", "-qam", "two")
	runGit(t, work, "push", "-q", "origin", "main")
	// Someone else pushes a commit.
	other := filepath.Join(base, "other")
	runGit(t, base, "clone", "-q", origin, other)
	write(t, filepath.Join(other, "c.txt"), "c\n")
	runGit(t, other, "add", ".")
	runGit(t, other, "commit", "-qm", "theirs")
	runGit(t, other, "push", "-q", "origin", "main")
	runGit(t, work, "fetch", "-q")
	write(t, filepath.Join(work, "d.txt"), "d\n")
	runGit(t, work, "add", ".")
	runGit(t, work, "commit", "-qm", "mine1")
	write(t, filepath.Join(work, "d.txt"), "d2\n")
	runGit(t, work, "commit", "-qam", "mine2")
	write(t, filepath.Join(work, "b.txt"), "staged\n")
	runGit(t, work, "add", "b.txt")
	write(t, filepath.Join(work, "a.txt"), "unstaged\n")
	write(t, filepath.Join(work, "new/u1.txt"), "u\n")
	write(t, filepath.Join(work, "u2.txt"), "u\n")
	write(t, filepath.Join(work, "ignored.log"), "i\n")
	write(t, filepath.Join(work, ".git/info/exclude"), "*.log\n")
	return work
}

// fromGit derives the expected State from the git command line.
func fromGit(t testing.TB, work string) State {
	var st State
	out := runGit(t, work, "status", "--porcelain=v2", "--branch", "--untracked-files=all")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "# branch.oid "):
			if f[2] != "(initial)" {
				st.Head = f[2]
			}
		case strings.HasPrefix(line, "# branch.head "):
			if f[2] == "(detached)" {
				st.Detached = true
			} else {
				st.Branch = f[2]
			}
		case strings.HasPrefix(line, "# branch.upstream "):
			st.Upstream = f[2]
		case strings.HasPrefix(line, "# branch.ab "):
			st.Ahead, _ = strconv.Atoi(strings.TrimPrefix(f[2], "+"))
			st.Behind, _ = strconv.Atoi(strings.TrimPrefix(f[3], "-"))
		case strings.HasPrefix(line, "? "):
			st.Untracked++
		case strings.HasPrefix(line, "1 "), strings.HasPrefix(line, "2 "):
			if f[1][0] != '.' {
				st.Staged++
			}
			if f[1][1] != '.' {
				st.Unstaged++
			}
		}
	}
	st.Dirty = st.Staged+st.Unstaged+st.Untracked > 0
	return st
}

func inspect(t testing.TB, dir string) *State {
	t.Helper()
	root, err := fsguard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	st, err := Inspect(root, ".")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestInspectMatchesGit(t *testing.T) {
	work := fixture(t)
	got := inspect(t, work)
	want := fromGit(t, work)
	if got == nil || *got != want {
		t.Fatalf("Inspect = %+v\ngit says  %+v", got, want)
	}
	if want.Ahead != 2 || want.Behind != 1 || want.Staged != 1 || want.Unstaged != 1 || want.Untracked != 2 {
		t.Fatalf("fixture is not what the test expects: %+v", want)
	}
}

func TestInspectDetachedAndNoRepo(t *testing.T) {
	work := fixture(t)
	runGit(t, work, "stash", "-q", "-u")
	runGit(t, work, "checkout", "-q", "--detach", "HEAD~1")
	got := inspect(t, work)
	want := fromGit(t, work)
	if *got != want || !got.Detached || got.Dirty {
		t.Fatalf("Inspect = %+v\ngit says  %+v", got, want)
	}
	if st := inspect(t, t.TempDir()); st != nil {
		t.Fatalf("no repo: got %+v", st)
	}
}

func TestInspectLinkedWorktree(t *testing.T) {
	work := fixture(t)
	wt := filepath.Join(filepath.Dir(work), "wt")
	runGit(t, work, "worktree", "add", "-q", "-b", "feature", wt, "HEAD~1")
	runGit(t, wt, "branch", "-q", "--set-upstream-to=origin/main")
	write(t, filepath.Join(wt, "x.txt"), "x\n")
	write(t, filepath.Join(wt, "b.txt"), "wt-staged\n")
	runGit(t, wt, "add", "b.txt")
	got := inspect(t, wt)
	want := fromGit(t, wt)
	if *got != want || got.Branch != "feature" {
		t.Fatalf("Inspect = %+v\ngit says  %+v", got, want)
	}
}

func TestInspectAlternates(t *testing.T) {
	work := fixture(t)
	clone := filepath.Join(filepath.Dir(work), "shared")
	runGit(t, filepath.Dir(work), "clone", "-q", "--shared", work, clone)
	if _, err := os.Stat(filepath.Join(clone, ".git/objects/info/alternates")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(clone, "z.txt"), "z\n")
	got := inspect(t, clone)
	want := fromGit(t, clone)
	if *got != want {
		t.Fatalf("Inspect = %+v\ngit says  %+v", got, want)
	}
}

func TestInspectAheadBehindWithMerge(t *testing.T) {
	work := fixture(t)
	runGit(t, work, "stash", "-q", "-u")
	runGit(t, work, "merge", "-q", "--no-edit", "origin/main")
	runGit(t, work, "stash", "pop", "-q")
	got := inspect(t, work)
	want := fromGit(t, work)
	if *got != want || got.Ahead != 3 || got.Behind != 0 {
		t.Fatalf("Inspect = %+v\ngit says  %+v", got, want)
	}
}

func TestInspectUnbornBranch(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	runGit(t, dir, "init", "-q", "-b", "trunk")
	write(t, filepath.Join(dir, "a"), "a\n")
	got := inspect(t, dir)
	if got.Head != "" || got.Branch != "trunk" || got.Untracked != 1 || !got.Dirty {
		t.Fatalf("Inspect = %+v", got)
	}
}
