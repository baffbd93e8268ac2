package integration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"golang.org/x/sys/unix"
)

// category says what the guard owes an input.
type category int

const (
	catInside      category = iota // a name inside the root: may succeed, only inside
	catFinalLink                   // a symlink itself: may be described, removed or renamed; never followed
	catAbsolute                    // refused before any syscall
	catDotDot                      // refused before any syscall
	catMalformed                   // NUL, empty components, over-long: refused before any syscall
	catThroughLink                 // a symlink or a non-directory as a parent component: refused
)

func (c category) String() string {
	return [...]string{"inside", "final-link", "absolute", "dotdot", "malformed", "through-link"}[c]
}

// mustFail reports whether every operation on an input of this category must be refused.
func (c category) mustFail() bool { return c >= catAbsolute }

type hostileInput struct {
	path string
	cat  category
}

// canary is part of the name of an entry in every outside tree: no listing may ever show it.
const canary = "leak-canary"

// hostileEnv is a workspace full of traps, beside outside trees that nothing may touch.
type hostileEnv struct {
	t             *testing.T
	c             *controllerProc
	ws, sibling   api.Workspace
	root          string // the workspace root on the host
	rootMode      fs.FileMode
	alloc         string // its allocation directory: the root's parent
	outsideNext   string // beside the root, inside the allocation directory
	outsideFar    string // elsewhere on the host
	marker        string // in every outside file's content
	devices       bool   // device nodes could be made (root with CAP_MKNOD)
	baseline      map[string]treeSnap
	fixture       treeSnap // the workspace tree as reset left it
	shallowBefore map[string]treeSnap
}

// The traps planted in the workspace root before every case.
var fixtureLinks = []string{
	"link-root", "link-parent", "link-parent-abs", "link-outside", "link-outside-rel", "link-outside-file",
	"link-far", "link-sibling", "link-sibling-rel", "link-dangling", "link-dangling-abs", "chain1", "chain2",
	"link-loop", "link-proc-root", "link-proc-cwd", "link-proc-fd", "link-inside", "link-inside-file",
	"dir/link-up", "dir/sub/link-up3",
}

func newHostileEnv(t *testing.T) *hostileEnv {
	c := startController(t, serveOpts{})
	e := &hostileEnv{t: t, c: c, ws: c.createWorkspace(t), sibling: c.createWorkspace(t), outsideFar: t.TempDir()}
	e.root = e.ws.Root
	fi, err := os.Stat(e.root)
	if err != nil {
		t.Fatal(err)
	}
	e.rootMode = fi.Mode().Perm()
	e.alloc = filepath.Dir(e.root)
	e.outsideNext = filepath.Join(e.alloc, "outside")
	var b [8]byte
	_, _ = rand.Read(b[:])
	e.marker = "TETHER-OUTSIDE-MARKER-" + hex.EncodeToString(b[:])
	for _, dir := range []string{e.outsideNext, e.outsideFar, e.sibling.Root} {
		e.writeOutside(dir)
	}
	mustWrite(t, filepath.Join(e.root, "keep", "secret.txt"), []byte("the workspace's own file\n"), 0o600)
	mustWrite(t, filepath.Join(e.root, "keep", "nested", "deep.txt"), []byte("deeper\n"), 0o644)
	e.baseline = map[string]treeSnap{}
	for _, dir := range e.fullTrees() {
		e.baseline[dir] = snapTree(t, dir)
	}
	e.shallowBefore = e.snapShallow()
	e.reset()
	return e
}

// settle ends a case: it checks the outside and, when the workspace tree differs from the
// fixture, plants it again. A refused operation must have changed nothing, inside included.
func (e *hostileEnv) settle(what string, refused bool) {
	e.t.Helper()
	e.assertUntouched(what)
	if d := e.fixture.diff(snapTree(e.t, e.root)); d != nil {
		if refused {
			e.t.Errorf("%s was refused but changed the workspace: %v", what, d)
		}
		e.reset()
	}
}

// writeOutside makes a small tree with marked content, a subdirectory, links and an empty dir.
func (e *hostileEnv) writeOutside(dir string) {
	t := e.t
	mustWrite(t, filepath.Join(dir, "marker.txt"), []byte(e.marker+" top\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "d", canary+".txt"), []byte(e.marker+" nested\n"), 0o640)
	mustWrite(t, filepath.Join(dir, "d", "x"), []byte(e.marker+" x\n"), 0o600)
	mustWrite(t, filepath.Join(dir, "x"), []byte(e.marker+" a file named x\n"), 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "marker.txt", filepath.Join(dir, "link-to-marker"))
	mustSymlink(t, "/etc/passwd", filepath.Join(dir, "d", "abs-link"))
}

// fullTrees are compared entry by entry, content included, after every case.
func (e *hostileEnv) fullTrees() []string {
	return []string{e.outsideNext, e.outsideFar, e.sibling.Root, filepath.Join(e.root, "keep")}
}

// snapShallow describes the directories around the roots (the allocation directories, the
// provider's directory of allocations) without descending: a case must not add, remove or
// replace anything there. Entries that legitimately change (the roots, the runner's growing
// log) are described by identity and type only.
func (e *hostileEnv) snapShallow() map[string]treeSnap {
	out := map[string]treeSnap{}
	for _, dir := range []string{e.alloc, filepath.Dir(e.alloc), filepath.Dir(e.sibling.Root)} {
		s := treeSnap{".": lstatSnap(e.t, dir, false)}
		ents, err := os.ReadDir(dir)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ent := range ents {
			live := ent.Name() == "root" || ent.Name() == "runner.log" || strings.HasPrefix(ent.Name(), "al_")
			snap := lstatSnap(e.t, filepath.Join(dir, ent.Name()), live)
			if ent.Name() == "root" {
				snap.mode = snap.mode.Type() // `chmod .` legitimately sets the root's own bits
			}
			s[ent.Name()] = snap
		}
		out[dir] = s
	}
	return out
}

func lstatSnap(t *testing.T, p string, identityOnly bool) entrySnap {
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if identityOnly {
		return entrySnap{ino: st.Ino, mode: fi.Mode()}
	}
	return entrySnap{ino: st.Ino, mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime(), ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec)}
}

// assertUntouched fails the test when anything outside the root, or the workspace's own
// protected files, differs from the baseline.
func (e *hostileEnv) assertUntouched(what string) {
	e.t.Helper()
	for _, dir := range e.fullTrees() {
		if d := e.baseline[dir].diff(snapTree(e.t, dir)); d != nil {
			e.t.Fatalf("%s changed %s: %v", what, dir, d)
		}
	}
	now := e.snapShallow()
	for dir, before := range e.shallowBefore {
		if d := before.diff(now[dir]); d != nil {
			e.t.Fatalf("%s changed %s: %v", what, dir, d)
		}
	}
}

// reset empties the root (except keep/) and plants every trap again, so each case meets the
// same tree whatever the previous one legitimately did inside.
func (e *hostileEnv) reset() {
	t := e.t
	defer func() { e.fixture = snapTree(t, e.root) }()
	if err := os.Chmod(e.root, e.rootMode); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(e.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if ent.Name() == "keep" {
			continue
		}
		p := filepath.Join(e.root, ent.Name())
		// A case may have chmodded a directory to 0640. Only directories are touched
		// (os.Chmod follows links: the traps point outside).
		_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(q, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	at := func(p string) string { return filepath.Join(e.root, p) }
	mustWrite(t, at("file.txt"), []byte("an inside file\n"), 0o644)
	mustWrite(t, at("mv-source.txt"), []byte("moved by the corpus\n"), 0o644)
	mustWrite(t, at("dir/inner.txt"), []byte("inner\n"), 0o644)
	if err := os.MkdirAll(at("dir/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	siblingAlloc := filepath.Base(filepath.Dir(e.sibling.Root))
	for name, target := range map[string]string{
		"link-root": "/", "link-parent": "..", "link-parent-abs": e.alloc, "link-outside": e.outsideNext,
		"link-outside-rel": "../outside", "link-outside-file": filepath.Join(e.outsideNext, "marker.txt"),
		"link-far": e.outsideFar, "link-sibling": e.sibling.Root, "link-sibling-rel": "../../" + siblingAlloc + "/root",
		"link-dangling": "does-not-exist", "link-dangling-abs": "/nonexistent-tether-dir/q",
		"chain1": "chain2", "chain2": "chain3", "chain3": e.outsideNext, "link-loop": "link-loop",
		"link-proc-root": "/proc/self/root", "link-proc-cwd": "/proc/self/cwd", "link-proc-fd": "/proc/self/fd",
		"link-inside": "dir", "link-inside-file": "file.txt", "dir/link-up": "../..", "dir/sub/link-up3": "../../..",
	} {
		mustSymlink(t, target, at(name))
	}
	if err := unix.Mkfifo(at("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(at("sock"), unix.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	e.devices = os.Geteuid() == 0
	for name, dev := range map[string]uint32{"chardev-null": unix.S_IFCHR, "chardev-zero": unix.S_IFCHR, "blockdev": unix.S_IFBLK} {
		if !e.devices {
			break
		}
		minor := map[string]uint32{"chardev-null": 3, "chardev-zero": 5, "blockdev": 0}[name]
		major := map[string]uint32{"chardev-null": 1, "chardev-zero": 1, "blockdev": 7}[name]
		if err := unix.Mknod(at(name), dev|0o644, int(unix.Mkdev(major, minor))); err != nil {
			if err == syscall.EPERM {
				e.devices = false // no CAP_MKNOD: devices are skipped
				continue
			}
			t.Fatal(err)
		}
	}
	giveToAgent(t, e.root)
}

// corpus generates the hostile inputs. Escape routes are aimed at real outside files, so a
// guard that let one through would visibly read or change the outside trees.
func (e *hostileEnv) corpus() []hostileInput {
	var in []hostileInput
	seen := map[string]category{}
	add := func(cat category, paths ...string) {
		for _, p := range paths {
			if prev, ok := seen[p]; ok {
				if prev != cat {
					e.t.Fatalf("corpus: %q generated as both %s and %s", p, prev, cat)
				}
				continue // generated twice by different rules: one case is enough
			}
			seen[p] = cat
			in = append(in, hostileInput{p, cat})
		}
	}
	relFar, _ := filepath.Rel(e.root, filepath.Join(e.outsideFar, "marker.txt"))
	relSibling, _ := filepath.Rel(e.root, filepath.Join(e.sibling.Root, "marker.txt"))

	add(catAbsolute, "/", "//", "/etc/passwd", "/./etc/passwd", "/../etc", "/proc/self/root/etc/passwd", "/dev/zero",
		filepath.Join(e.outsideNext, "marker.txt"), filepath.Join(e.root, "file.txt"), filepath.Join(e.sibling.Root, "x"),
		e.outsideFar, "/tmp")
	// ".." at every depth, bare, aimed at real outside files, and below real directories.
	for d := 1; d <= 8; d++ {
		up := strings.Repeat("../", d)
		add(catDotDot, up+"x", "dir/"+up+"x", "./"+up+"outside/marker.txt", "dir/sub/"+up+"file.txt", strings.TrimSuffix(up, "/"))
	}
	add(catDotDot, "../outside/marker.txt", relFar, relSibling, "dir/..", "dir/../file.txt", "a/b/../../../x",
		"./..", "x/..", strings.Repeat("d/", 40)+strings.Repeat("../", 41)+"x")
	// Percent-encoded and look-alike forms: through the client's escaping they are plain names.
	add(catInside, "%2e%2e/x", "%2e%2e%2fx", "..%2fx", "..%2f..%2f..%2fetc%2fpasswd", "%2fetc%2fpasswd", "%252e%252e%252f",
		"..%5c..%5cx", `..\..\x`, "%00", "%2e", "%2e%2e", "dir/%2e%2e/%2e%2e/x", "\u2024\u2024/x", "\uff0e\uff0e/x",
		"\xc0\xae\xc0\xae/x", "\xe0\x80\xae\xe0\x80\xae", "...", ".../x", "..x", "x..", ". .")
	// NUL bytes, empty components, over-long names and paths.
	add(catMalformed, "\x00", "a\x00b", "file.txt\x00", "file.txt\x00/../../etc/passwd", "\x00/../x", "dir/\x00",
		"link-outside\x00/marker.txt", "a//b", "dir//inner.txt", "dir/", "./", ".//", "x//", "dir/sub//",
		strings.Repeat("a", 256), "dir/"+strings.Repeat("b", 256), strings.Repeat("a/", 2049), strings.Repeat("n", 10000),
		strings.Repeat("x/", 2047)+"abc")
	add(catInside, "", ".", "./.", "./file.txt", "dir/./inner.txt", strings.Repeat("a", 255), strings.Repeat("x/", 300)+"y",
		"file.txt", "dir", "dir/inner.txt", "dir/sub", "missing", "dir/missing", "keep-not", " ", "-rf", "~", "~root",
		"$HOME", "*", "?", "\n", "a\nb", "\r", "\t", "\x1b[31mred", "CON", "nul", ".git", ".tether-tmp-x", "dir/.tether-tmp-abc",
		"name with spaces", "\u202etxt.exe", "e\u0301", "\u00e9")
	// Symlinks: each as itself, and as a parent with suffixes that would reach real files.
	for _, l := range fixtureLinks {
		add(catFinalLink, l, l+"/.")
		add(catMalformed, l+"/")
		add(catDotDot, l+"/../x")
		add(catThroughLink, l+"/x", l+"/marker.txt", l+"/d/"+canary+".txt")
	}
	add(catFinalLink, "chain3")
	for _, l := range []string{"link-root", "link-proc-root"} {
		// The absolute routes through "/" land on the outside trees.
		add(catThroughLink, l+e.outsideNext+"/marker.txt", l+e.outsideFar+"/x", l+"/etc/passwd", l+"/tmp/tether-created")
	}
	add(catThroughLink, "link-parent/outside/marker.txt", "link-parent-abs/outside/x", "link-proc-cwd/file.txt",
		"link-proc-cwd/keep/secret.txt", "link-proc-fd/0", "link-inside/inner.txt", "link-inside/sub", "link-inside-file/x",
		"dir/link-up/outside/x", "dir/sub/link-up3/outside/marker.txt", "chain1/marker.txt", "chain1/d", "link-sibling/x",
		"link-sibling-rel/marker.txt", "link-far/empty/new")
	// Specials: a fifo, a socket and (as root) devices, as themselves and as parents.
	specials := []string{"fifo", "sock"}
	if e.devices {
		specials = append(specials, "chardev-null", "chardev-zero", "blockdev")
	}
	for _, s := range specials {
		add(catInside, s)
		add(catThroughLink, s+"/x")
		add(catMalformed, s+"/")
		add(catDotDot, s+"/../x")
	}
	add(catThroughLink, "file.txt/x", "dir/inner.txt/x")
	return in
}

func (h hostileInput) String() string { return fmt.Sprintf("%q (%s)", h.path, h.cat) }
