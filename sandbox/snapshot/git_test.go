package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo builds the fidelity fixture in base/work: commits, a bare origin
// with one unpushed local commit, a staged change, an unstaged change, an
// untracked file, two stashes, an executable, a symlink, an empty
// directory and a binary file.
func gitRepo(t testing.TB, base string) string {
	needTool(t, "git")
	origin := filepath.Join(base, "origin.git")
	work := filepath.Join(base, "work")
	runGit(t, base, "init", "-q", "--bare", "-b", "main", origin)
	runGit(t, base, "clone", "-q", origin, work)
	writeFile(t, filepath.Join(work, "README.md"), "# fixture\n", 0o644)
	writeFile(t, filepath.Join(work, "src/main.go"), "package main\n", 0o644)
	writeFile(t, filepath.Join(work, "run.sh"), "#!/bin/sh\necho run\n", 0o755)
	must(t, os.Symlink("src/main.go", filepath.Join(work, "main-link")))
	bin := make([]byte, 4096)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(work, "data.bin"), bin, 0o644))
	runGit(t, work, "add", ".")
	runGit(t, work, "commit", "-qm", "initial")
	writeFile(t, filepath.Join(work, "src/main.go"), "package main\n\nfunc main() {}\n", 0o644)
	runGit(t, work, "commit", "-qam", "second")
	runGit(t, work, "tag", "-a", "v1", "-m", "release 1")
	runGit(t, work, "push", "-q", "-u", "origin", "main", "--tags")
	writeFile(t, filepath.Join(work, "src/unpushed.go"), "package main // unpushed\n", 0o644)
	runGit(t, work, "add", ".")
	runGit(t, work, "commit", "-qm", "unpushed")
	writeFile(t, filepath.Join(work, "README.md"), "# stashed once\n", 0o644)
	runGit(t, work, "stash", "-q")
	writeFile(t, filepath.Join(work, "stash-untracked.txt"), "u\n", 0o644)
	runGit(t, work, "stash", "-q", "-u", "-m", "second stash")
	writeFile(t, filepath.Join(work, "src/main.go"), "package main\n\nfunc main() { println(1) }\n", 0o644)
	runGit(t, work, "add", "src/main.go")
	writeFile(t, filepath.Join(work, "README.md"), "# unstaged edit\n", 0o644)
	writeFile(t, filepath.Join(work, "notes/untracked.txt"), "untracked\n", 0o644)
	must(t, os.MkdirAll(filepath.Join(work, "empty/dir"), 0o755))
	return work
}

// gitView is what the git command line reports about a worktree.
func gitView(t testing.TB, dir string) map[string]string {
	t.Helper()
	v := map[string]string{
		"head":    runGit(t, dir, "rev-parse", "HEAD"),
		"status":  runGit(t, dir, "status", "--porcelain=v2", "--branch", "--untracked-files=all"),
		"diff":    runGit(t, dir, "diff"),
		"cached":  runGit(t, dir, "diff", "--cached"),
		"stashes": runGit(t, dir, "stash", "list", "--format=%H %gs"),
		"ahead":   runGit(t, dir, "log", "--format=%H %s", "@{u}.."),
		"tags":    runGit(t, dir, "tag", "-n"),
		"branch":  runGit(t, dir, "branch", "-vv", "--format=%(refname) %(objectname) %(upstream)"),
	}
	// Every stash's content, the untracked part of a stash -u included.
	for i := range strings.Count(v["stashes"], "\n") {
		ref := fmt.Sprintf("stash@{%d}", i)
		v[ref] = runGit(t, dir, "stash", "show", "-p", "--include-untracked", ref)
	}
	return v
}

func notGit(rel string) bool { return rel == ".git" || strings.HasPrefix(rel, ".git/") }

// checkFidelity captures ws, makes the sources unreachable with hide,
// restores into a fresh directory and compares what git and the file
// system report.
func checkFidelity(t *testing.T, ws string, hide func()) *Manifest {
	wantGit := gitView(t, ws)
	wantFiles := describe(t, ws, true, notGit)
	data, m := capture(t, ws)
	if m.Git == nil {
		t.Fatalf("no git state in manifest (git_error %q)", m.GitError)
	}
	if hide != nil {
		hide()
	}
	dst := filepath.Join(t.TempDir(), "restored")
	must(t, os.Mkdir(dst, 0o755))
	if _, err := restoreInto(t, data, dst, "."); err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(wantFiles, describe(t, dst, true, notGit)); d != "" {
		t.Fatalf("worktree files differ:\n%s", d)
	}
	got := gitView(t, dst)
	for k, v := range wantGit {
		if got[k] != v {
			t.Errorf("git %s differs:\nbefore:\n%s\nafter:\n%s", k, v, got[k])
		}
	}
	runGit(t, dst, "fsck", "--no-progress", "--strict")
	// The restored repository's own view agrees with the manifest.
	root := openRoot(t, dst)
	var buf bytes.Buffer
	m2, err := Capture(context.Background(), root, &buf, CaptureOptions{})
	must(t, err)
	if *m2.Git != *m.Git || m2.GitNormalized != "" {
		t.Errorf("git state after restore %+v (normalized %q), before %+v", m2.Git, m2.GitNormalized, m.Git)
	}
	return m
}

func TestGitFidelityPlain(t *testing.T) {
	work := gitRepo(t, t.TempDir())
	m := checkFidelity(t, work, nil)
	g := m.Git
	if g.Branch != "main" || g.Upstream != "origin/main" || g.Ahead != 1 || g.Behind != 0 ||
		g.Staged != 1 || g.Unstaged != 1 || g.Untracked != 1 || !g.Dirty || m.GitNormalized != "" {
		t.Fatalf("git state %+v normalized %q", g, m.GitNormalized)
	}
}

func TestGitFidelityLinkedWorktree(t *testing.T) {
	base := t.TempDir()
	work := gitRepo(t, base)
	wt := filepath.Join(base, "wt")
	runGit(t, work, "worktree", "add", "-q", "-b", "feature", wt, "HEAD")
	runGit(t, wt, "branch", "-q", "--set-upstream-to=origin/main")
	writeFile(t, filepath.Join(wt, "feature.txt"), "feature\n", 0o644)
	// Larger than smallObject: its loose object is deflated twice.
	bigFile(t, filepath.Join(wt, "assets/big.bin"), smallObject+12345)
	runGit(t, wt, "add", ".")
	runGit(t, wt, "commit", "-qm", "feature work")
	writeFile(t, filepath.Join(wt, "wt-stash.txt"), "s\n", 0o644)
	runGit(t, wt, "add", ".")
	runGit(t, wt, "stash", "-q", "-m", "worktree stash")
	writeFile(t, filepath.Join(wt, "run.sh"), "#!/bin/sh\necho staged in wt\n", 0o755)
	runGit(t, wt, "add", "run.sh")
	writeFile(t, filepath.Join(wt, "README.md"), "# wt unstaged\n", 0o644)
	writeFile(t, filepath.Join(wt, "wt-untracked"), "u\n", 0o644)
	must(t, os.MkdirAll(filepath.Join(wt, "empty-wt"), 0o755))
	// The main repository is moved away after capture: the restored
	// worktree must stand alone.
	m := checkFidelity(t, wt, func() { must(t, os.Rename(work, work+".gone")) })
	if m.GitNormalized != NormalizedLinkedWorktree || m.Git.Branch != "feature" || m.Git.Ahead != 2 {
		t.Fatalf("normalized %q git %+v", m.GitNormalized, m.Git)
	}
}

func TestGitFidelityAlternates(t *testing.T) {
	base := t.TempDir()
	work := gitRepo(t, base)
	shared := filepath.Join(base, "shared")
	runGit(t, base, "clone", "-q", "--shared", work, shared)
	writeFile(t, filepath.Join(shared, "mine.txt"), "mine\n", 0o644)
	runGit(t, shared, "add", ".")
	runGit(t, shared, "commit", "-qm", "in the shared clone")
	writeFile(t, filepath.Join(shared, "README.md"), "# stashed\n", 0o644)
	runGit(t, shared, "stash", "-q")
	writeFile(t, filepath.Join(shared, "README.md"), "# edited\n", 0o644)
	m := checkFidelity(t, shared, func() { must(t, os.Rename(work, work+".gone")) })
	if m.GitNormalized != NormalizedAlternates {
		t.Fatalf("normalized %q", m.GitNormalized)
	}
}

func TestGitLockFileIsBusy(t *testing.T) {
	for _, lock := range []string{"index.lock", "HEAD.lock", "refs/heads/main.lock", "shallow.lock"} {
		t.Run(lock, func(t *testing.T) {
			work := gitRepo(t, t.TempDir())
			writeFile(t, filepath.Join(work, ".git", lock), "", 0o644)
			var buf bytes.Buffer
			_, err := Capture(context.Background(), openRoot(t, work), &buf, CaptureOptions{})
			wantCode(t, err, CodeGitBusy)
		})
	}
	t.Run("linked worktree", func(t *testing.T) {
		base := t.TempDir()
		work := gitRepo(t, base)
		wt := filepath.Join(base, "wt")
		runGit(t, work, "worktree", "add", "-q", wt)
		writeFile(t, filepath.Join(work, ".git/worktrees/wt/index.lock"), "", 0o644)
		var buf bytes.Buffer
		_, err := Capture(context.Background(), openRoot(t, wt), &buf, CaptureOptions{})
		wantCode(t, err, CodeGitBusy)
	})
}

// TestGitUnreadable: a .git directory go-git cannot read is still
// archived as files, with the reason in the manifest; a linked worktree
// whose git directory is gone cannot be normalized and is refused.
func TestGitUnreadable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".git/HEAD"), "garbage", 0o644)
	_, m := capture(t, dir)
	if m.Git != nil || m.GitError == "" || m.Totals.Files != 1 {
		t.Fatalf("git %+v error %q totals %+v", m.Git, m.GitError, m.Totals)
	}
	wt := t.TempDir()
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: /nonexistent/.git/worktrees/x\n", 0o644)
	var buf bytes.Buffer
	_, err := Capture(context.Background(), openRoot(t, wt), &buf, CaptureOptions{})
	wantCode(t, err, CodeUnsupported)
}
