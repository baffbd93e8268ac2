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

// cloned is a workspace cloned from src at its main, with the branch ws tracking origin/main.
func cloned(t *testing.T) (src, root, base string) {
	t.Helper()
	src = newSource(t)
	base = commit(t, src, "second", map[string]string{"old.txt": "old\n", "keep.txt": "keep\n"})
	root = emptyRoot(t)
	if _, err := CloneFromPack(context.Background(), root, bytes.NewReader(pack(t, src, base)), protocol.GitCheckoutArgs{
		Strategy: protocol.GitStrategyClone, Branch: "ws", Commit: base, BaseRef: "main", BaseCommit: base}); err != nil {
		t.Fatal(err)
	}
	return src, root, base
}

// advance moves src's main on: a new file, a changed one, a removed one. It returns the new
// commit and a pack of what the workspace lacks (not thin).
func advance(t *testing.T, src, have string) (string, []byte) {
	t.Helper()
	next := commit(t, src, "base moves", map[string]string{"new/dir/new.txt": "new\n", "keep.txt": "kept, changed\n", "old.txt": ""})
	return next, pack(t, src, next, "^"+have)
}

func reconcile(t *testing.T, root string, p []byte, c string) protocol.GitReconcileReply {
	t.Helper()
	var body *bytes.Reader
	args := protocol.GitReconcileArgs{BaseRef: "main", Commit: c, HasPack: p != nil}
	var rep protocol.GitReconcileReply
	var err error
	if p != nil {
		body = bytes.NewReader(p)
		rep, err = Reconcile(context.Background(), root, body, args)
	} else {
		rep, err = Reconcile(context.Background(), root, nil, args)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A clean workspace behind its base is fast-forwarded: branch, index and files, as Git sees them.
func TestReconcileFastForward(t *testing.T) {
	src, root, base := cloned(t)
	next, p := advance(t, src, base)
	rep := reconcile(t, root, p, next)
	want := protocol.GitReconcileReply{Before: base, After: next, Action: protocol.GitFastForwarded}
	if rep != want {
		t.Fatalf("reply %+v, want %+v", rep, want)
	}
	if got := run(t, root, "rev-parse", "HEAD", "refs/heads/ws", "origin/main"); got != strings.Join([]string{next, next, next}, "\n") {
		t.Fatalf("refs:\n%s", got)
	}
	if out := run(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status is not clean:\n%s", out)
	}
	if got := run(t, root, "symbolic-ref", "HEAD"); got != "refs/heads/ws" {
		t.Fatalf("HEAD is %s", got)
	}
	sameFiles(t, src, root)
	run(t, root, "fsck", "--strict", "--no-progress")
	if out := run(t, root, "reflog", "-1", "--format=%H %gs", "ws"); out != next+" tether: fast-forward to the base" {
		t.Fatalf("reflog: %q", out)
	}
	for _, lock := range []string{".git/index.lock", ".git/refs/heads/ws.lock", ".git/refs/remotes/origin/main.lock"} {
		if _, err := os.Lstat(filepath.Join(root, lock)); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", lock, err)
		}
	}

	// Again: nothing to do. A commit of its own: ahead.
	if rep := reconcile(t, root, nil, next); rep.Action != protocol.GitUpToDate || rep.Before != next || rep.After != next {
		t.Fatalf("second reconcile: %+v", rep)
	}
	own := commit(t, root, "mine", map[string]string{"mine.txt": "m\n"})
	if rep := reconcile(t, root, nil, next); rep.Action != protocol.GitAhead || rep.Ahead != 1 || rep.After != own {
		t.Fatalf("with a commit of its own: %+v", rep)
	}
}

// A branch with commits of its own is never moved, even when the base moved on.
func TestReconcileDiverged(t *testing.T) {
	src, root, base := cloned(t)
	own := commit(t, root, "mine", map[string]string{"mine.txt": "m\n"})
	next, p := advance(t, src, base)
	rep := reconcile(t, root, p, next)
	want := protocol.GitReconcileReply{Before: own, After: own, Ahead: 1, Behind: 1, Action: protocol.GitDiverged}
	if rep != want {
		t.Fatalf("reply %+v, want %+v", rep, want)
	}
	if got := run(t, root, "rev-parse", "ws"); got != own {
		t.Fatalf("ws moved to %s", got)
	}
	// The base is recorded all the same, so git shows the divergence.
	if got := run(t, root, "rev-parse", "origin/main"); got != next {
		t.Fatalf("origin/main is %s", got)
	}
	if out := run(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status is not clean:\n%s", out)
	}
}

// Uncommitted work, tracked or untracked, is never touched.
func TestReconcileDirty(t *testing.T) {
	for _, tc := range []struct{ name, file string }{{"modified", "keep.txt"}, {"untracked", "scratch.txt"}, {"staged", "staged.txt"}} {
		t.Run(tc.name, func(t *testing.T) {
			src, root, base := cloned(t)
			write(t, root, tc.file, "work in progress\n")
			if tc.name == "staged" {
				run(t, root, "add", tc.file)
			}
			statusBefore := run(t, root, "status", "--porcelain")
			next, p := advance(t, src, base)
			rep := reconcile(t, root, p, next)
			want := protocol.GitReconcileReply{Before: base, After: base, Behind: 1, Action: protocol.GitDirty}
			if rep != want {
				t.Fatalf("reply %+v, want %+v", rep, want)
			}
			if got := run(t, root, "rev-parse", "ws"); got != base {
				t.Fatalf("ws moved to %s", got)
			}
			if got := run(t, root, "status", "--porcelain"); got != statusBefore {
				t.Fatalf("status changed:\n%s\nwas\n%s", got, statusBefore)
			}
			if b, _ := os.ReadFile(filepath.Join(root, tc.file)); string(b) != "work in progress\n" {
				t.Fatalf("%s changed: %q", tc.file, b)
			}
			if _, err := os.Lstat(filepath.Join(root, "old.txt")); err != nil {
				t.Fatalf("old.txt: %v", err)
			}
		})
	}
}

// A detached HEAD is reported, never moved.
func TestReconcileDetached(t *testing.T) {
	src, root, base := cloned(t)
	run(t, root, "checkout", "-q", "--detach")
	next, p := advance(t, src, base)
	rep := reconcile(t, root, p, next)
	if rep.Action != protocol.GitDiverged || rep.Before != base || rep.After != base || rep.Behind != 1 || rep.Ahead != 0 {
		t.Fatalf("reply %+v", rep)
	}
	if got := run(t, root, "rev-parse", "HEAD", "ws"); got != base+"\n"+base {
		t.Fatalf("moved:\n%s", got)
	}
}

// Refusals: a commit the repository lacks, a bad base ref, a Git command holding the index.
func TestReconcileRefusals(t *testing.T) {
	ctx := context.Background()
	src, root, base := cloned(t)
	next, p := advance(t, src, base)
	_, err := Reconcile(ctx, root, nil, protocol.GitReconcileArgs{BaseRef: "main", Commit: next})
	wantCode(t, err, protocol.CodeNotFound)
	_, err = Reconcile(ctx, root, nil, protocol.GitReconcileArgs{BaseRef: "-main", Commit: next})
	wantCode(t, err, protocol.CodeInvalidArgument)
	_, err = Reconcile(ctx, t.TempDir(), nil, protocol.GitReconcileArgs{BaseRef: "main", Commit: next})
	wantCode(t, err, protocol.CodeNotFound)

	lock := filepath.Join(root, ".git", "index.lock")
	write(t, root, ".git/index.lock", "")
	_, err = Reconcile(ctx, root, bytes.NewReader(p), protocol.GitReconcileArgs{BaseRef: "main", Commit: next, HasPack: true})
	wantCode(t, err, protocol.CodeGitBusy)
	if got := run(t, root, "rev-parse", "ws"); got != base {
		t.Fatalf("ws moved to %s", got)
	}
	if _, err := os.Lstat(lock); err != nil {
		t.Fatalf("someone else's lock was removed: %v", err)
	}
	os.Remove(lock)
	// The objects arrived with the refused attempt; no pack is needed now.
	if rep := reconcile(t, root, nil, next); rep.Action != protocol.GitFastForwarded {
		t.Fatalf("reply %+v", rep)
	}
}

// What the fast-forward checks under Git's locks: the branch still where it was counted, the
// tree still clean, the ref not locked by someone else. Each refusal changes nothing and leaves
// no lock of its own behind.
func TestFastForwardUnderLocks(t *testing.T) {
	ctx := context.Background()
	src, root, base := cloned(t)
	next, p := advance(t, src, base)
	if _, err := Reconcile(ctx, root, bytes.NewReader(p), protocol.GitReconcileArgs{BaseRef: "main", Commit: next, HasPack: true}); err != nil {
		t.Fatal(err)
	}
	run(t, root, "reset", "-q", "--hard", base) // behind again, objects present
	r, err := open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	ws := plumbingBranch("ws")
	noLocks := func() {
		t.Helper()
		for _, l := range []string{".git/index.lock", ".git/refs/heads/ws.lock"} {
			if _, err := os.Lstat(filepath.Join(root, l)); !os.IsNotExist(err) {
				t.Fatalf("%s: %v", l, err)
			}
		}
		if got := run(t, root, "rev-parse", "ws"); got != base {
			t.Fatalf("ws moved to %s", got)
		}
	}

	_, err = fastForward(ctx, r, ws, mustHash(t, next), mustHash(t, next)) // counted at another commit
	wantCode(t, err, protocol.CodeGitBusy)
	noLocks()

	write(t, root, "new-since.txt", "x")
	if moved, err := fastForward(ctx, r, ws, mustHash(t, base), mustHash(t, next)); moved || err != nil {
		t.Fatalf("dirty tree: moved %v, %v", moved, err)
	}
	noLocks()
	os.Remove(filepath.Join(root, "new-since.txt"))

	write(t, root, ".git/refs/heads/ws.lock", "")
	_, err = fastForward(ctx, r, ws, mustHash(t, base), mustHash(t, next))
	wantCode(t, err, protocol.CodeGitBusy)
	if _, err := os.Lstat(filepath.Join(root, ".git/index.lock")); !os.IsNotExist(err) {
		t.Fatalf("index.lock left: %v", err)
	}
	os.Remove(filepath.Join(root, ".git/refs/heads/ws.lock"))

	if moved, err := fastForward(ctx, r, ws, mustHash(t, base), mustHash(t, next)); !moved || err != nil {
		t.Fatalf("moved %v, %v", moved, err)
	}
	if out := run(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status is not clean:\n%s", out)
	}
}

// A pack of nothing (everything wanted is already there) is fine.
func TestReconcileEmptyPack(t *testing.T) {
	src, root, base := cloned(t)
	p := pack(t, src, base, "^"+base)
	if rep := reconcile(t, root, p, base); rep.Action != protocol.GitUpToDate {
		t.Fatalf("reply %+v", rep)
	}
	if entries, _ := filepath.Glob(filepath.Join(root, ".git/objects/pack/tmp_*")); len(entries) > 0 {
		t.Fatalf("temporary files left: %v", entries)
	}
}
