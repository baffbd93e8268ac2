package snapshot

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/gitstate"
	"golang.org/x/sys/unix"
)

// planGit reads the root repository's state for the manifest and decides
// whether its .git must be normalized: a linked worktree (.git is a file
// naming a git directory, usually outside the workspace) and a repository
// borrowing objects through objects/info/alternates would not survive the
// move to another machine as they are, so Capture writes a standalone
// .git directory in their place. A plain .git directory is archived as
// its files.
func (c *capturer) planGit(root *fsguard.Root) error {
	kind := ""
	fi, err := root.Lstat(".git")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().IsRegular():
		kind = NormalizedLinkedWorktree
	case fi.IsDir():
		if _, err := root.Lstat(".git/objects/info/alternates"); err == nil {
			kind = NormalizedAlternates
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	repo, err := gitstate.Open(root, ".")
	if err != nil {
		if kind != "" {
			return newError(CodeUnsupported, ".git", "cannot read the repository to normalize it ("+kind+")", err)
		}
		c.m.GitError = err.Error()
		return nil
	}
	if repo == nil {
		return nil
	}
	if st, err := repo.State(); err != nil {
		c.m.GitError = err.Error()
	} else {
		c.m.Git = st
	}
	if kind != "" {
		c.git, c.m.GitNormalized = repo, kind
	}
	return nil
}

// vnode is one entry of the normalized .git directory.
type vnode struct {
	path  string // below .git; "" is .git itself
	dir   bool
	mode  uint32
	mtime time.Time
	// Exactly one source for a file: synthesized bytes, a verbatim copy
	// of src/srcName, or the loose form of object obj.
	data    []byte
	src     billy.Filesystem
	srcName string
	listed  *fileID
	obj     plumbing.Hash
	objType plumbing.ObjectType
}

// Names in a git directory that are not copied verbatim from the
// worktree's own git directory: they belong to the common directory, are
// rewritten, or only make sense where they are.
var (
	notPerWorktreeFiles = map[string]bool{"commondir": true, "gitdir": true, "locked": true, "config": true,
		"config.worktree": true, "packed-refs": true, "shallow": true, "description": true}
	notPerWorktreeDirs = map[string]bool{"logs": true, "refs": true, "objects": true, "info": true, "hooks": true,
		"worktrees": true, "lfs": true, "branches": true, "remotes": true, "rr-cache": true}
	commonFiles = []string{"description", "shallow"}
	commonDirs  = []string{"hooks", "info", "lfs", "rr-cache"}
)

// normalizer builds the standalone .git of a linked worktree or of a
// repository with alternates: HEAD, the index and the worktree's other
// state files as they are; config without worktree settings; every ref
// but the per-worktree ones (packed, symbolic refs loose); the stash
// reflog; and, as loose objects, every object reachable from those refs,
// HEAD, the pseudo-refs (ORIG_HEAD, MERGE_HEAD, ...), the stash reflog and
// the index.
type normalizer struct {
	c     *capturer
	r     *gitstate.Repo
	nodes []*vnode
	roots []root
	seen  map[plumbing.Hash]plumbing.ObjectType
}

func (c *capturer) writeGit() error {
	n := &normalizer{c: c, r: c.git, seen: map[plumbing.Hash]plumbing.ObjectType{}}
	if err := n.checkLocks(); err != nil {
		return err
	}
	if err := n.plan(); err != nil {
		return err
	}
	return n.emit()
}

// checkLocks refuses a repository in the middle of a Git operation.
func (n *normalizer) checkLocks() error {
	busy := func(p string) error {
		return newError(CodeGitBusy, ".git/"+p, "a Git lock file exists: a Git command is running (or crashed; remove the lock if no git process is running)", nil)
	}
	for _, fsys := range []billy.Filesystem{n.r.GitDir, n.r.Common} {
		ents, err := fsys.ReadDir("")
		if err != nil {
			return fmt.Errorf("read git directory: %w", err)
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".lock") {
				return busy(e.Name())
			}
		}
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := n.r.Common.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("read git directory: %w", err)
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			switch {
			case e.IsDir():
				if err := walk(p); err != nil {
					return err
				}
			case strings.HasSuffix(e.Name(), ".lock"):
				return busy(p)
			}
		}
		return nil
	}
	return walk("refs")
}

func (n *normalizer) plan() error {
	mt := n.c.m.CreatedAt
	n.nodes = append(n.nodes, &vnode{dir: true, mode: 0o755, mtime: mt})
	if err := n.copyTree(n.r.GitDir, "", true, true); err != nil {
		return err
	}
	for _, name := range commonFiles {
		if err := n.copyNamed(n.r.Common, name, false); err != nil {
			return err
		}
	}
	for _, name := range commonDirs {
		if err := n.copyNamed(n.r.Common, name, true); err != nil {
			return err
		}
	}
	if err := n.copyNamed(n.r.Common, "logs/refs/stash", false); err != nil {
		return err
	}
	cfg, err := n.config()
	if err != nil {
		return err
	}
	n.addFile("config", 0o644, cfg)
	if err := n.refs(); err != nil {
		return err
	}
	for _, d := range []string{"refs/heads", "refs/tags", "objects/info", "objects/pack"} {
		n.nodes = append(n.nodes, &vnode{path: d, dir: true, mode: 0o755, mtime: mt})
	}
	if err := n.collectRoots(); err != nil {
		return err
	}
	if err := n.walkObjects(); err != nil {
		return err
	}
	for h, t := range n.seen {
		s := h.String()
		n.nodes = append(n.nodes, &vnode{path: "objects/" + s[:2] + "/" + s[2:], mode: 0o444, mtime: mt, obj: h, objType: t})
	}
	n.addParents()
	sort.Slice(n.nodes, func(i, j int) bool { return sortKey(n.nodes[i].path) < sortKey(n.nodes[j].path) })
	for i := 1; i < len(n.nodes); i++ {
		if n.nodes[i].path == n.nodes[i-1].path {
			return fmt.Errorf("normalized .git: duplicate entry %s", n.nodes[i].path)
		}
	}
	return nil
}

// sortKey orders paths depth first with each directory's children in
// lexical order, the order of the workspace walk: "/" sorts before any
// byte a name can hold.
func sortKey(p string) string { return strings.ReplaceAll(p, "/", "\x00") }

func (n *normalizer) addFile(p string, mode uint32, data []byte) {
	n.nodes = append(n.nodes, &vnode{path: p, mode: mode, mtime: n.c.m.CreatedAt, data: data})
}

// addParents adds the directories that nodes imply but nothing listed.
func (n *normalizer) addParents() {
	have := map[string]bool{}
	for _, v := range n.nodes {
		if v.dir {
			have[v.path] = true
		}
	}
	for _, v := range n.nodes {
		for d := path.Dir(v.path); v.path != "" && d != "."; d = path.Dir(d) {
			if have[d] {
				break
			}
			have[d] = true
			n.nodes = append(n.nodes, &vnode{path: d, dir: true, mode: 0o755, mtime: n.c.m.CreatedAt})
		}
	}
}

// copyNamed copies the file or directory tree name of fsys, if present.
func (n *normalizer) copyNamed(fsys billy.Filesystem, name string, dir bool) error {
	fi, err := fsys.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if dir != fi.IsDir() {
		return nil
	}
	return n.add(fsys, name, fi, false)
}

// copyTree copies the children of dir in fsys; top selects the
// per-worktree filter for the git directory's top level, and scan looks
// for object names in small files (ORIG_HEAD, rebase state, ...).
func (n *normalizer) copyTree(fsys billy.Filesystem, dir string, top, scan bool) error {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read git directory: %w", err)
	}
	for _, fi := range ents {
		if top && (notPerWorktreeFiles[fi.Name()] && !fi.IsDir() || notPerWorktreeDirs[fi.Name()] && fi.IsDir()) {
			continue
		}
		if err := n.add(fsys, path.Join(dir, fi.Name()), fi, scan); err != nil {
			return err
		}
	}
	return nil
}

// add copies one listed entry (recursively for a directory); small
// per-worktree files are scanned for object names to keep.
func (n *normalizer) add(fsys billy.Filesystem, p string, fi os.FileInfo, scan bool) error {
	switch {
	case strings.HasSuffix(fi.Name(), ".lock") && !fi.IsDir():
		return newError(CodeGitBusy, ".git/"+p, "a Git lock file exists: a Git command is running", nil)
	case fi.IsDir():
		n.nodes = append(n.nodes, &vnode{path: p, dir: true, mode: uint32(fi.Mode().Perm()), mtime: fi.ModTime().UTC()})
		return n.copyTree(fsys, p, false, scan)
	case fi.Mode().IsRegular():
		n.nodes = append(n.nodes, &vnode{path: p, src: fsys, srcName: p, listed: idOf(fi)})
		if scan && p != "index" && fi.Size() <= 64<<10 {
			return n.scanNames(fsys, p)
		}
		return nil
	}
	n.c.skip(".git/"+p, modeBits(fi.Mode()), "not a regular file or directory in the normalized Git directory")
	return nil
}

// idOf identifies a listed file: hostFS listings carry a
// *syscall.Stat_t, guard listings a *unix.Stat_t.
func idOf(fi os.FileInfo) *fileID {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return &fileID{ino: st.Ino, dev: st.Dev}
	case *unix.Stat_t:
		return &fileID{ino: st.Ino, dev: st.Dev}
	}
	return nil
}

// modeBits converts a listed mode for Skipped's type name.
func modeBits(m fs.FileMode) uint32 {
	switch m.Type() {
	case fs.ModeSymlink:
		return syscall.S_IFLNK
	case fs.ModeNamedPipe:
		return syscall.S_IFIFO
	case fs.ModeSocket:
		return syscall.S_IFSOCK
	case fs.ModeDevice | fs.ModeCharDevice:
		return syscall.S_IFCHR
	case fs.ModeDevice:
		return syscall.S_IFBLK
	}
	return 0
}

func (n *normalizer) emit() error {
	c := n.c
	for _, v := range n.nodes {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		p := ".git"
		if v.path != "" {
			p += "/" + v.path
		}
		var err error
		switch {
		case v.dir:
			err = c.writeDir(p, v.mode, v.mtime)
		case v.src != nil:
			err = n.copy(p, v)
		case v.data != nil:
			err = c.writeStream(p, v.mode, v.mtime, int64(len(v.data)), func(w io.Writer) error {
				_, err := w.Write(v.data)
				return err
			})
		default:
			err = n.writeObject(p, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (n *normalizer) copy(p string, v *vnode) error {
	f, err := v.src.Open(v.srcName)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return newError(CodeChangedDuringCapture, p, "removed while it was archived", err)
		}
		return err
	}
	defer f.Close()
	osf, ok := f.(interface{ OS() *os.File })
	if !ok {
		return fmt.Errorf("%s: not a plain file", p)
	}
	return n.c.copyFile(p, osf.OS(), v.listed)
}

// writeDir archives a synthesized directory.
func (c *capturer) writeDir(p string, mode uint32, mt time.Time) error {
	h := &tar.Header{Name: p + "/", Typeflag: tar.TypeDir, Mode: int64(mode), ModTime: mt, Format: tar.FormatPAX}
	if err := c.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeDir, Mode: mode, MTime: mt})
	return nil
}

// writeStream archives a synthesized file of a known size whose content
// fill writes.
func (c *capturer) writeStream(p string, mode uint32, mt time.Time, size int64, fill func(io.Writer) error) error {
	h := &tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: int64(mode), Size: size, ModTime: mt, Format: tar.FormatPAX}
	if err := c.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	sum := sha256.New()
	cw := &countWriter{w: io.MultiWriter(c.tw, sum)}
	if err := fill(cw); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if cw.n != size {
		return fmt.Errorf("write %s: produced %d bytes, announced %d", p, cw.n, size)
	}
	c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeFile, Mode: mode, Size: size,
		SHA256: hex.EncodeToString(sum.Sum(nil)), MTime: mt})
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
