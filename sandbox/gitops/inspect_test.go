package gitops

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/gitstate"
)

// Inspect counts as `git status` does and counts ahead/behind through a merge: the workspace
// branch merged a side branch (two commits of its own: the side commit and the merge) while the
// base moved one commit on.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	dir := newSource(t)
	fork := run(t, dir, "rev-parse", "HEAD")
	baseTip := commit(t, dir, "base moves", map[string]string{"base.txt": "b\n"})
	run(t, dir, "checkout", "-q", "-b", "side", fork)
	commit(t, dir, "side", map[string]string{"side.txt": "s\n"})
	run(t, dir, "checkout", "-q", "-b", "ws", fork)
	run(t, dir, "merge", "-q", "--no-ff", "-m", "merge side", "side")
	head := run(t, dir, "rev-parse", "HEAD")

	write(t, dir, "staged.txt", "new\n")
	run(t, dir, "add", "staged.txt")
	write(t, dir, "README.md", "changed\n")
	write(t, dir, "untracked.txt", "u\n")
	write(t, dir, "debug.log", "ignored by .gitignore\n")
	write(t, dir, "local.tmp", "ignored by info/exclude\n")
	if err := os.WriteFile(filepath.Join(dir, ".git/info/exclude"), []byte("# local\n*.tmp\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	st, err := Inspect(ctx, dir, protocol.GitInspectArgs{BaseCommit: baseTip})
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.GitStatus{Head: head, Branch: "ws", BaseKnown: true, Ahead: 2, Behind: 1, Staged: 1, Unstaged: 1, Untracked: 1}
	if st != want {
		t.Fatalf("status %+v, want %+v", st, want)
	}
	if got := run(t, dir, "rev-list", "--left-right", "--count", "HEAD..."+baseTip); got != "2\t1" {
		t.Fatalf("git counts %q", got)
	}

	// Without a base commit (or with one the repository lacks) the upstream is the base.
	run(t, dir, "update-ref", "refs/remotes/origin/main", baseTip)
	run(t, dir, "config", "branch.ws.remote", "origin")
	run(t, dir, "config", "branch.ws.merge", "refs/heads/main")
	run(t, dir, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")
	for _, base := range []string{"", strings.Repeat("ab", 20)} {
		st, err = Inspect(ctx, dir, protocol.GitInspectArgs{BaseCommit: base})
		if err != nil {
			t.Fatal(err)
		}
		if st.Upstream != "origin/main" || !st.BaseKnown || st.Ahead != 2 || st.Behind != 1 {
			t.Fatalf("against the upstream (base %q): %+v", base, st)
		}
	}

	// Nothing to count against.
	run(t, dir, "config", "--unset", "branch.ws.merge")
	if st, err = Inspect(ctx, dir, protocol.GitInspectArgs{BaseCommit: strings.Repeat("ab", 20)}); err != nil || st.BaseKnown || st.Ahead != 0 || st.Upstream != "" {
		t.Fatalf("no base: %+v %v", st, err)
	}

	// Detached.
	run(t, dir, "checkout", "-q", "--detach", fork)
	if st, err = Inspect(ctx, dir, protocol.GitInspectArgs{BaseCommit: baseTip}); err != nil || st.Branch != "" || st.Head != fork || st.Ahead != 0 || st.Behind != 1 {
		t.Fatalf("detached: %+v %v", st, err)
	}

	// Not a repository; an empty one.
	_, err = Inspect(ctx, t.TempDir(), protocol.GitInspectArgs{BaseCommit: ""})
	wantCode(t, err, protocol.CodeNotFound)
	empty := t.TempDir()
	run(t, empty, "init", "-q", "-b", "main")
	write(t, empty, "a", "a")
	if st, err = Inspect(ctx, empty, protocol.GitInspectArgs{BaseCommit: ""}); err != nil || st.Head != "" || st.Branch != "main" || st.Untracked != 1 {
		t.Fatalf("empty repository: %+v %v", st, err)
	}
	_, err = Inspect(ctx, dir, protocol.GitInspectArgs{BaseCommit: "not-a-commit"})
	wantCode(t, err, protocol.CodeInvalidArgument)
}

// A .git that is a symlink is not followed.
func TestInspectRefusesDotGitSymlink(t *testing.T) {
	src := newSource(t)
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(src, ".git"), filepath.Join(root, ".git")); err != nil {
		t.Fatal(err)
	}
	_, err := Inspect(context.Background(), root, protocol.GitInspectArgs{BaseCommit: ""})
	wantCode(t, err, protocol.CodeSymlinkRefused)
}

// Ahead/behind agrees with `git rev-list --left-right --count` on random histories full of merges
// (octopus ones too) and criss-crosses.
func TestAheadBehindMatchesGit(t *testing.T) {
	dir := t.TempDir()
	run(t, dir, "init", "-q", "-b", "main")
	tree := run(t, dir, "hash-object", "-t", "tree", "-w", "/dev/null")
	rng := rand.New(rand.NewPCG(1, 2))
	var commits []string
	for i := range 120 {
		args := []string{"commit-tree", tree, "-m", strconv.Itoa(i)}
		if len(commits) > 0 {
			n := 1
			switch r := rng.IntN(10); {
			case r == 0 && len(commits) > 3:
				n = 3
			case r < 4:
				n = 2
			}
			seen := map[string]bool{}
			for range n {
				// Mostly recent parents, sometimes far back: long-lived branches.
				k := len(commits) - 1 - min(rng.IntN(8), len(commits)-1)
				if rng.IntN(6) == 0 {
					k = rng.IntN(len(commits))
				}
				if p := commits[k]; !seen[p] {
					seen[p] = true
					args = append(args, "-p", p)
				}
			}
		}
		commits = append(commits, run(t, dir, args...))
	}
	run(t, dir, "update-ref", "refs/heads/main", commits[len(commits)-1])
	r, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	diverged := 0
	for range 60 {
		a, b := commits[rng.IntN(len(commits))], commits[rng.IntN(len(commits))]
		ah, bh, err := gitstate.AheadBehind(context.Background(), r, mustHash(t, a), mustHash(t, b))
		if err != nil {
			t.Fatal(err)
		}
		want := run(t, dir, "rev-list", "--left-right", "--count", a+"..."+b)
		if got := fmt.Sprintf("%d\t%d", ah, bh); got != want {
			t.Fatalf("%s...%s: got %q, git says %q", a[:8], b[:8], got, want)
		}
		if ah > 0 && bh > 0 {
			diverged++
		}
		ok, err := gitstate.Reachable(context.Background(), r, mustHash(t, b), mustHash(t, a))
		if err != nil {
			t.Fatal(err)
		}
		_, gitErr := runIn(t, dir, nil, "merge-base", "--is-ancestor", a, b)
		if ok != (gitErr == nil) {
			t.Fatalf("gitstate.Reachable(%s from %s) = %v, git says %v", a[:8], b[:8], ok, gitErr == nil)
		}
	}
	if diverged < 10 {
		t.Fatalf("only %d diverged pairs: the history is too simple to test anything", diverged)
	}
}
