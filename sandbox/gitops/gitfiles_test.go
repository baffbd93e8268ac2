package gitops

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// Symlinks planted in a workspace repository's .git never carry the runner's own writes (locks,
// refs, reflogs) outside the workspace: each case would write outside without the guard.
func TestReconcileNeverWritesThroughPlantedLinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, git, outDir string)
	}{
		{"refs/heads is a link out", func(t *testing.T, git, outDir string) {
			// The ref go-git reads stays where a scoped lookup finds it; the raw write would
			// follow the link.
			scoped := filepath.Join(git, strings.TrimPrefix(outDir, "/"))
			mustDo(t, os.MkdirAll(scoped, 0o755))
			head, err := os.ReadFile(filepath.Join(git, "refs", "heads", "ws"))
			mustDo(t, err)
			mustDo(t, os.WriteFile(filepath.Join(scoped, "victim.txt"), head, 0o644))
			mustDo(t, os.RemoveAll(filepath.Join(git, "refs", "heads")))
			mustDo(t, os.Symlink(outDir, filepath.Join(git, "refs", "heads")))
			mustDo(t, os.WriteFile(filepath.Join(git, "HEAD"), []byte("ref: refs/heads/victim.txt\n"), 0o644))
		}},
		{"logs/HEAD is a link to a file outside", func(t *testing.T, git, outDir string) {
			mustDo(t, os.MkdirAll(filepath.Join(git, "logs"), 0o755))
			_ = os.Remove(filepath.Join(git, "logs", "HEAD"))
			mustDo(t, os.Symlink(filepath.Join(outDir, "victim.txt"), filepath.Join(git, "logs", "HEAD")))
		}},
		{"refs/remotes/origin is a link out", func(t *testing.T, git, outDir string) {
			mustDo(t, os.RemoveAll(filepath.Join(git, "refs", "remotes", "origin")))
			mustDo(t, os.Symlink(outDir, filepath.Join(git, "refs", "remotes", "origin")))
		}},
		{"info/exclude is a link to a file outside", func(t *testing.T, git, outDir string) {
			mustDo(t, os.MkdirAll(filepath.Join(git, "info"), 0o755))
			_ = os.Remove(filepath.Join(git, "info", "exclude"))
			mustDo(t, os.Symlink(filepath.Join(outDir, "victim.txt"), filepath.Join(git, "info", "exclude")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, root, base := cloned(t)
			next, p := advance(t, src, base)
			outDir := t.TempDir()
			victim := filepath.Join(outDir, "victim.txt")
			mustDo(t, os.WriteFile(victim, []byte("precious\n"), 0o644))
			tc.plant(t, filepath.Join(root, ".git"), outDir)
			_, _ = Reconcile(context.Background(), root, bytes.NewReader(p), protocol.GitReconcileArgs{BaseRef: "main", Commit: next, HasPack: true})
			if got, err := os.ReadFile(victim); err != nil || string(got) != "precious\n" {
				t.Fatalf("the file outside changed: %q %v", got, err)
			}
			entries, err := os.ReadDir(outDir)
			mustDo(t, err)
			if len(entries) != 1 {
				t.Fatalf("files appeared outside the workspace: %v", entries)
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A .git file or a commondir naming a directory elsewhere is refused, a real linked worktree's
// too: the runner only ever reads and writes a repository inside the workspace, never a base
// repository another workspace (or the controller) shares.
func TestGitDirElsewhereIsRefused(t *testing.T) {
	ctx := context.Background()
	src, root, base := cloned(t)
	elsewhere := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(root, ".git", "commondir"), []byte(elsewhere+"\n"), 0o644))
	if _, err := Inspect(ctx, root, protocol.GitInspectArgs{BaseCommit: base}); protocol.CodeOf(err) != protocol.CodeCorrupt {
		t.Fatalf("commondir in a workspace repository: %v", err)
	}
	mustDo(t, os.Remove(filepath.Join(root, ".git", "commondir")))
	mustDo(t, os.Rename(filepath.Join(root, ".git"), filepath.Join(root, "moved.git")))
	mustDo(t, os.WriteFile(filepath.Join(root, ".git"), []byte("gitdir: "+filepath.Join(root, "moved.git")+"\n"), 0o644))
	if _, err := Inspect(ctx, root, protocol.GitInspectArgs{BaseCommit: base}); protocol.CodeOf(err) != protocol.CodePathEscape {
		t.Fatalf(".git file in a workspace: %v", err)
	}
	if _, err := Reconcile(ctx, root, nil, protocol.GitReconcileArgs{BaseRef: "main", Commit: base}); protocol.CodeOf(err) != protocol.CodePathEscape {
		t.Fatalf("reconcile through a .git file: %v", err)
	}

	baseRepo := filepath.Join(t.TempDir(), "base.git")
	run(t, src, "clone", "-q", "--bare", src, baseRepo)
	wt := filepath.Join(t.TempDir(), "wt")
	run(t, baseRepo, "worktree", "add", "-q", "-b", "tether/ws", wt, "main")
	before := run(t, baseRepo, "for-each-ref")
	next, p := advance(t, src, base)
	if _, err := Inspect(ctx, wt, protocol.GitInspectArgs{}); protocol.CodeOf(err) != protocol.CodePathEscape {
		t.Fatalf("inspect of a linked worktree: %v", err)
	}
	if _, err := Reconcile(ctx, wt, bytes.NewReader(p), protocol.GitReconcileArgs{BaseRef: "main", Commit: next, HasPack: true}); protocol.CodeOf(err) != protocol.CodePathEscape {
		t.Fatalf("reconcile of a linked worktree: %v", err)
	}
	if after := run(t, baseRepo, "for-each-ref"); after != before {
		t.Fatalf("the base repository's refs changed:\n%s\nwas\n%s", after, before)
	}
	if out, err := runIn(t, baseRepo, nil, "cat-file", "-e", next); err == nil {
		t.Fatalf("the pack's objects reached the base repository: %s", out)
	}
}

// A hard link planted (as an ignored file) where a fast-forward adds a file keeps its content:
// the checkout replaces the name instead of writing through it.
func TestFastForwardReplacesHardLinkedFiles(t *testing.T) {
	src, root, base := cloned(t)
	next, p := advance(t, src, base) // adds new/dir/new.txt
	outside := filepath.Join(t.TempDir(), "linked.txt")
	mustDo(t, os.WriteFile(outside, []byte("precious\n"), 0o644))
	mustDo(t, os.MkdirAll(filepath.Join(root, ".git", "info"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, ".git", "info", "exclude"), []byte("new/\n"), 0o644)) // ignored: the tree stays clean
	mustDo(t, os.MkdirAll(filepath.Join(root, "new", "dir"), 0o755))
	if err := os.Link(outside, filepath.Join(root, "new", "dir", "new.txt")); err != nil {
		t.Skipf("no hard links across these directories: %v", err)
	}
	rep, err := Reconcile(context.Background(), root, bytes.NewReader(p), protocol.GitReconcileArgs{BaseRef: "main", Commit: next, HasPack: true})
	if err != nil || rep.Action != protocol.GitFastForwarded {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	if got, _ := os.ReadFile(outside); string(got) != "precious\n" {
		t.Fatalf("the hard-linked file outside was written through: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "new", "dir", "new.txt")); string(got) != "new\n" {
		t.Fatalf("new.txt after the fast-forward: %q", got)
	}
}

// A checkout never writes a path with a .git component (git refuses such trees).
func TestWorktreeNeverWritesDotGit(t *testing.T) {
	g, err := newGuardFS(t.TempDir())
	mustDo(t, err)
	defer g.Close()
	if _, err := g.Create("sub/.git"); err == nil {
		t.Fatal("created sub/.git")
	}
	if err := g.MkdirAll("a/.GIT/x", 0o755); err == nil {
		t.Fatal("made a/.GIT/x")
	}
	if err := g.Symlink("elsewhere", "b/.git"); err == nil {
		t.Fatal("linked b/.git")
	}
	if _, err := g.Create("sub/git.txt"); err != nil {
		t.Fatalf("an ordinary name: %v", err)
	}
}
