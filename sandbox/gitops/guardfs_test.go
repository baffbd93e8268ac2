package gitops

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-git/go-billy/v5"
	"github.com/tetherhq/tether/protocol"
)

// outsideFixture is a workspace root beside a directory "outside" holding one file, which
// nothing done in the root may change.
func outsideFixture(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, outside, "file", "outside\n")
	return root, outside
}

func assertOutside(t *testing.T, outside string) {
	t.Helper()
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "file" {
		t.Fatalf("something was written outside the root: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "file")); string(b) != "outside\n" {
		t.Fatalf("outside/file changed: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(outside, "file")); fi.Mode().Perm() != 0o644 {
		t.Fatalf("outside/file mode changed: %v", fi.Mode())
	}
}

// The worktree filesystem itself never follows a symlink, at any component, whatever go-git's
// own checks do: links escaping the root (relative, absolute) and links staying inside alike.
func TestGuardFSNeverFollows(t *testing.T) {
	root, outside := outsideFixture(t)
	for name, target := range map[string]string{"rel": "../outside", "abs": outside, "in": "sub",
		"flink": "../outside/file", "up": ".."} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, root, "sub/f", "inside\n")
	g, err := newGuardFS(root)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: not refused", what)
		}
		if c := protocol.CodeOf(err); c != protocol.CodeSymlinkRefused && c != protocol.CodePathEscape {
			t.Fatalf("%s: %v (code %s), want symlink_refused", what, err, c)
		}
	}
	for _, dir := range []string{"rel", "abs", "in", "up", "rel/sub"} {
		p := dir + "/x"
		_, err := g.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		refused("OpenFile "+p, err)
		_, err = g.Create(p)
		refused("Create "+p, err)
		refused("Symlink "+p, g.Symlink("t", p))
		refused("MkdirAll "+p, g.MkdirAll(p, 0o755))
		refused("Rename to "+p, g.Rename("sub/f", p))
		_, err = g.Lstat(p)
		refused("Lstat "+p, err)
		_, err = g.Open(dir + "/file")
		refused("Open "+dir+"/file", err)
		_, err = g.ReadDir(dir)
		refused("ReadDir "+dir, err)
		refused("Remove "+p, g.Remove(p))
	}
	// A symlink as the final component is never opened, written, chmod'ed or stat'ed through.
	_, err = g.OpenFile("flink", os.O_WRONLY|os.O_TRUNC, 0o644)
	refused("OpenFile flink", err)
	_, err = g.OpenFile("flink", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		t.Fatal("O_EXCL over a symlink succeeded")
	}
	_, err = g.Open("flink")
	refused("Open flink", err)
	_, err = g.Stat("flink")
	refused("Stat flink", err)
	refused("Chmod flink", g.Chmod("flink", 0o777))
	refused("MkdirAll rel", g.MkdirAll("rel", 0o755))
	for _, bad := range []string{"../outside/x", "sub/../../outside/x", "/etc/x"} {
		if _, err := g.Create(bad); err == nil {
			t.Fatalf("Create %s: not refused", bad)
		}
	}
	assertOutside(t, outside)

	// Links are listed, read and removed as links.
	if fi, err := g.Lstat("rel"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("Lstat rel: %v, %v", fi, err)
	}
	if got, err := g.Readlink("rel"); err != nil || got != "../outside" {
		t.Fatalf("Readlink rel: %q, %v", got, err)
	}
	if err := g.Remove("flink"); err != nil {
		t.Fatal(err)
	}
	assertOutside(t, outside)

	// What go-git relies on: missing names are os.IsNotExist, created files get their missing
	// parents, stat data is a *syscall.Stat_t, listings are sorted, and a symlink is created
	// verbatim.
	if _, err := g.Lstat("no/such"); !os.IsNotExist(err) {
		t.Fatalf("Lstat of a missing name: %v", err)
	}
	if err := g.Remove("nothing"); !os.IsNotExist(err) {
		t.Fatalf("Remove of a missing name: %v", err)
	}
	f, err := g.OpenFile("new/deep/f.txt", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "hello")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := g.Lstat("new/deep/f.txt")
	if err != nil || fi.Size() != 5 || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("Lstat: %v, %v", fi, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Ino == 0 || st.Ctim.Sec == 0 {
		t.Fatalf("Sys() is %T %+v", fi.Sys(), fi.Sys())
	}
	if err := g.Symlink("../../outside", "links/l"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(filepath.Join(root, "links/l")); got != "../../outside" {
		t.Fatalf("symlink target %q", got)
	}
	ents, err := g.ReadDir("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "abs in links new rel sub up" {
		t.Fatalf("ReadDir: %s", got)
	}
	rf, err := g.Open("new/deep/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := rf.Lock(); err != nil {
		t.Fatal(err)
	}
	rf.Unlock()
	rf.Close()
	tf, err := g.TempFile("new", "tmp_")
	if err != nil || !strings.HasPrefix(tf.Name(), "new/tmp_") {
		t.Fatalf("TempFile: %v %v", tf, err)
	}
	tf.Close()
	if _, err := g.TempFile("rel", "tmp_"); err == nil {
		t.Fatal("TempFile through a link out: not refused")
	}
	if _, err := g.Chroot("new"); err != billy.ErrNotSupported {
		t.Fatalf("Chroot: %v", err)
	}
	assertOutside(t, outside)
}

// A commit with link -> ../outside, then one that replaces the link with a directory holding
// link/x: neither the clone of the first nor the fast-forward to the second writes outside the
// root, and the second's tree is checked out as committed.
func TestSymlinkThenPathThroughIt(t *testing.T) {
	ctx := context.Background()
	root, outside := outsideFixture(t)
	src := newSource(t)
	if err := os.Remove(filepath.Join(src, "link")); err != nil { // newSource's own link
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	first := commit(t, src, "link out", nil)
	if _, err := CloneFromPack(ctx, root, bytes.NewReader(pack(t, src, first)), protocol.GitCheckoutArgs{
		Branch: "ws", Commit: first, BaseRef: "main", BaseCommit: first}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(filepath.Join(root, "link")); got != "../outside" {
		t.Fatalf("link is %q", got)
	}
	assertOutside(t, outside)

	os.Remove(filepath.Join(src, "link"))
	second := commit(t, src, "through the link", map[string]string{"link/x": "x\n"})
	rep := reconcile(t, root, pack(t, src, second, "^"+first), second)
	if rep.Action != protocol.GitFastForwarded {
		t.Fatalf("reply %+v", rep)
	}
	assertOutside(t, outside)
	if fi, err := os.Lstat(filepath.Join(root, "link")); err != nil || !fi.IsDir() {
		t.Fatalf("link is not a directory now: %v, %v", fi, err)
	}
	sameFiles(t, src, root)
	if out := run(t, root, "status", "--porcelain"); out != "" {
		t.Fatalf("git status is not clean:\n%s", out)
	}

	// A tree crafted with both at once: the link and a directory of the same name.
	l := strings.TrimSpace(string(mustRun(t, src, []byte("../outside"), "hash-object", "-w", "--stdin")))
	x := strings.TrimSpace(string(mustRun(t, src, []byte("x\n"), "hash-object", "-w", "--stdin")))
	sub := strings.TrimSpace(string(mustRun(t, src, []byte("100644 blob "+x+"\tx\n"), "mktree")))
	tree := strings.TrimSpace(string(mustRun(t, src, []byte("120000 blob "+l+"\tlink\n040000 tree "+sub+"\tlink\n"), "mktree")))
	crafted := run(t, src, "commit-tree", "-m", "crafted", tree)
	root2, outside2 := outsideFixture(t)
	_, err := CloneFromPack(ctx, root2, bytes.NewReader(pack(t, src, crafted)), protocol.GitCheckoutArgs{Branch: "ws", Commit: crafted})
	t.Logf("clone of the crafted tree: %v", err)
	assertOutside(t, outside2)
}

func mustRun(t *testing.T, dir string, stdin []byte, args ...string) []byte {
	t.Helper()
	out, err := runIn(t, dir, stdin, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
