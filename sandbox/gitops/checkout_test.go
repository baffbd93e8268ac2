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

// A clone from a pack is a repository Git itself finds whole and clean: the commit checked out
// on the new branch, the files as committed (modes and symlinks too), origin/<base> recorded and
// tracked.
func TestCloneFromPack(t *testing.T) {
	src := newSource(t)
	base := run(t, src, "rev-parse", "HEAD")
	head := commit(t, src, "second", map[string]string{"src/more.go": "package app\n// more\n", "README.md": "hello again\n"})
	root := emptyRoot(t)

	st, err := CloneFromPack(context.Background(), root, bytes.NewReader(pack(t, src, head)), protocol.GitCheckoutArgs{
		Strategy: protocol.GitStrategyClone, Branch: "tether/ws1", Commit: head, BaseRef: "main", BaseCommit: base})
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.GitStatus{Head: head, Branch: "tether/ws1", Upstream: "origin/main", BaseKnown: true, Ahead: 1}
	if st != want {
		t.Fatalf("status %+v, want %+v", st, want)
	}
	if out := run(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status is not clean:\n%s", out)
	}
	if got := run(t, root, "log", "-1", "--format=%H"); got != head {
		t.Fatalf("git log shows %s, want %s", got, head)
	}
	if got := run(t, root, "symbolic-ref", "HEAD"); got != "refs/heads/tether/ws1" {
		t.Fatalf("HEAD is %s", got)
	}
	if got := run(t, root, "rev-parse", "refs/remotes/origin/main"); got != base {
		t.Fatalf("origin/main is %s, want %s", got, base)
	}
	if got := run(t, root, "rev-parse", "--abbrev-ref", "@{upstream}"); got != "origin/main" {
		t.Fatalf("upstream is %s", got)
	}
	if got := run(t, root, "rev-list", "--count", "@{upstream}..HEAD"); got != "1" {
		t.Fatalf("git counts %s commits ahead", got)
	}
	run(t, root, "fsck", "--strict", "--no-progress")
	sameFiles(t, src, root)
}

// A clone without a base ref has no upstream and still checks out.
func TestCloneWithoutBase(t *testing.T) {
	src := newSource(t)
	head := run(t, src, "rev-parse", "HEAD")
	root := emptyRoot(t)
	st, err := CloneFromPack(context.Background(), root, bytes.NewReader(pack(t, src, head)), protocol.GitCheckoutArgs{Branch: "work", Commit: head})
	if err != nil {
		t.Fatal(err)
	}
	if st.Upstream != "" || st.BaseKnown || !st.Clean() || st.Branch != "work" {
		t.Fatalf("status %+v", st)
	}
	if out := run(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status is not clean:\n%s", out)
	}
}

// A root with anything in it is refused and left as it was; bad branches, bad commits and packs
// that lack the commit are refused and leave the root empty.
func TestCloneRefusals(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	head := run(t, src, "rev-parse", "HEAD")
	other := commit(t, src, "other", map[string]string{"x": "x\n"})
	good := pack(t, src, head)
	args := func(branch, c string) protocol.GitCheckoutArgs {
		return protocol.GitCheckoutArgs{Strategy: protocol.GitStrategyClone, Branch: branch, Commit: c, BaseRef: "main", BaseCommit: c}
	}

	full := emptyRoot(t)
	write(t, full, "keep.txt", "mine\n")
	_, err := CloneFromPack(ctx, full, bytes.NewReader(good), args("ws", head))
	wantCode(t, err, protocol.CodeConflict)
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Fatalf("the root changed: %v", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "keep.txt")); string(b) != "mine\n" {
		t.Fatalf("keep.txt changed: %q", b)
	}

	_, err = CloneFromPack(ctx, filepath.Join(t.TempDir(), "missing"), bytes.NewReader(good), args("ws", head))
	wantCode(t, err, protocol.CodeNotFound)

	for _, b := range []string{"", "..", "a..b", "-x", "a b", "a\tb", "a\x01b", "a\x7fb", "HEAD", "x.lock", "a/", "/a", "a//b", "a~1", "a:b", "a@{0}", ".hidden", "a/.b"} {
		root := emptyRoot(t)
		_, err := CloneFromPack(ctx, root, bytes.NewReader(good), args(b, head))
		wantCode(t, err, protocol.CodeInvalidArgument)
		assertEmpty(t, root)
	}
	for _, c := range []string{"", "abc", strings.Repeat("z", 40), head[:39]} {
		root := emptyRoot(t)
		_, err := CloneFromPack(ctx, root, bytes.NewReader(good), args("ws", c))
		wantCode(t, err, protocol.CodeInvalidArgument)
		assertEmpty(t, root)
	}

	// The pack holds head's history, not other.
	root := emptyRoot(t)
	_, err = CloneFromPack(ctx, root, bytes.NewReader(good), args("ws", other))
	wantCode(t, err, protocol.CodeCorrupt)
	assertEmpty(t, root)

	// A pack of the commit alone, without its tree, cannot be checked out.
	root = emptyRoot(t)
	commitOnly, err := runIn(t, src, []byte(head+"\n"), "pack-objects", "--stdout", "-q")
	if err != nil {
		t.Fatal(err)
	}
	_, err = CloneFromPack(ctx, root, bytes.NewReader(commitOnly), args("ws", head))
	wantCode(t, err, protocol.CodeCorrupt)
	assertEmpty(t, root)

	// A pack without the history (made with a "have" the receiver lacks).
	root = emptyRoot(t)
	_, err = CloneFromPack(ctx, root, bytes.NewReader(pack(t, src, other, "^"+head)), protocol.GitCheckoutArgs{Branch: "ws", Commit: other})
	wantCode(t, err, protocol.CodeCorrupt)
	if !strings.Contains(err.Error(), "history") {
		t.Fatalf("not refused for its history: %v", err)
	}
	assertEmpty(t, root)

	// A cut or damaged pack.
	for _, p := range [][]byte{good[:len(good)/2], nil, []byte("PACK not really")} {
		root = emptyRoot(t)
		_, err = CloneFromPack(ctx, root, bytes.NewReader(p), args("ws", head))
		if err == nil {
			t.Fatal("a damaged pack was accepted")
		}
		assertEmpty(t, root)
	}
	damaged := bytes.Clone(good)
	damaged[len(damaged)-30] ^= 0xff
	root = emptyRoot(t)
	if _, err = CloneFromPack(ctx, root, bytes.NewReader(damaged), args("ws", head)); err == nil {
		t.Fatal("a pack with a bad checksum was accepted")
	}
	assertEmpty(t, root)
}
