package gitstate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
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

// openErr opens dir's repository and returns the error, failing the test
// if Open succeeds or takes longer than a few seconds (a FIFO opened on a
// host path would block it forever).
func openErr(t *testing.T, dir string) error {
	t.Helper()
	root, err := fsguard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	done := make(chan error, 1)
	go func() {
		r, err := Open(root, ".")
		if r != nil {
			err = nil
		} else if err == nil {
			err = errors.New("no repository")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Open succeeded")
		}
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Open is blocked: it followed a path outside the workspace")
		return nil
	}
}

func wantNotFollowed(t *testing.T, err error, path string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnsupported || e.Path != path || !e.NotFollowed || !IsNotFollowed(err) ||
		!strings.Contains(err.Error(), "not followed") || !strings.Contains(err.Error(), "outside the workspace") {
		t.Fatalf("want a not-followed %s error on %s, got %#v (%v)", CodeUnsupported, path, err, err)
	}
}

// A .git file names a git directory somewhere else: a real linked
// worktree, or whatever the agent wrote. It is never followed.
func TestInspectDoesNotFollowGitFile(t *testing.T) {
	t.Run("linked worktree", func(t *testing.T) {
		work := fixture(t)
		wt := filepath.Join(filepath.Dir(work), "wt")
		runGit(t, work, "worktree", "add", "-q", "-b", "feature", wt, "HEAD~1")
		wantNotFollowed(t, openErr(t, wt), ".git")
	})
	t.Run("host directory of FIFOs", func(t *testing.T) {
		host := t.TempDir()
		for _, name := range []string{"HEAD", "config", "commondir"} {
			if err := syscall.Mkfifo(filepath.Join(host, name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ws := t.TempDir()
		write(t, filepath.Join(ws, ".git"), "gitdir: "+host+"\n")
		wantNotFollowed(t, openErr(t, ws), ".git")
	})
	t.Run("in a subdirectory", func(t *testing.T) {
		ws := t.TempDir()
		write(t, filepath.Join(ws, "sub/.git"), "gitdir: ../../elsewhere\n")
		root, err := fsguard.Open(ws)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		_, err = Open(root, "sub")
		wantNotFollowed(t, err, "sub/.git")
	})
}

// A .git directory whose commondir or objects/info/alternates names
// another directory is not followed either.
func TestInspectDoesNotFollowCommondirOrAlternates(t *testing.T) {
	t.Run("alternates", func(t *testing.T) {
		work := fixture(t)
		clone := filepath.Join(filepath.Dir(work), "shared")
		runGit(t, filepath.Dir(work), "clone", "-q", "--shared", work, clone)
		if _, err := os.Stat(filepath.Join(clone, ".git/objects/info/alternates")); err != nil {
			t.Fatal(err)
		}
		wantNotFollowed(t, openErr(t, clone), ".git/objects/info/alternates")
	})
	t.Run("commondir", func(t *testing.T) {
		work := fixture(t)
		other := fixture(t)
		write(t, filepath.Join(work, ".git/commondir"), filepath.Join(other, ".git")+"\n")
		wantNotFollowed(t, openErr(t, work), ".git/commondir")
	})
}

// An alternates file written after Open (the agent races the runner) is
// not followed by go-git's own lookup either, not even to a directory
// inside the workspace.
func TestAlternatesWrittenAfterOpenAreNotFollowed(t *testing.T) {
	work := fixture(t)
	other := t.TempDir()
	runGit(t, other, "init", "-q")
	write(t, filepath.Join(other, "x"), "only in the other repository\n")
	h := strings.TrimSpace(runGit(t, other, "hash-object", "-w", "x"))
	loose := filepath.Join("objects", h[:2], h[2:])
	b, err := os.ReadFile(filepath.Join(other, ".git", loose))
	if err != nil {
		t.Fatal(err)
	}
	root, err := fsguard.Open(work)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	r, err := Open(root, ".")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(work, ".git/sub", loose), string(b))
	write(t, filepath.Join(work, ".git/objects/info/alternates"), "sub/objects\n")
	if _, err := r.Storage.EncodedObject(plumbing.AnyObject, plumbing.NewHash(h)); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Fatalf("object only an alternate holds: err %v, want %v", err, plumbing.ErrObjectNotFound)
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
