package gitops

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-git/go-billy/v5"
	git "github.com/go-git/go-git/v5"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/gitlimit"
	"golang.org/x/sys/unix"
)

// guardFS is the worktree filesystem go-git checks out, resets and reads status through: a
// billy.Filesystem over an fsguard.Root. Every path is resolved beneath the root's descriptor
// with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS (fsguard's O_NOFOLLOW walk where openat2 is
// missing) and acted on through a descriptor or as one name in a pinned parent directory. No
// symlink is ever followed, at any component: a committed or planted link is created, listed,
// read (Readlink) and removed as a link, and any other operation on a path through it, or on it
// as its final component, is refused (symlink_refused). That is stricter than osfs's BoundOS,
// which follows links that stay inside the root, and much cheaper: BoundOS evaluates every path
// with filepath.EvalSymlinks, an lstat of each component from "/", on every call.
//
// Implemented: what go-git's worktree (checkout, reset, status, gitignore) calls — Create,
// Open, OpenFile, Stat, Lstat, ReadDir, MkdirAll, Symlink, Readlink, Remove, Rename, Chmod,
// Join, Root, Capabilities, and TempFile for go-git's object store. Not implemented: Chroot
// (only submodules and alternates use it: both are refused that way), billy.ErrNotSupported.
// Stat never follows a link, so on a symlink it fails instead of describing the target.
type guardFS struct {
	root *fsguard.Root
	dir  string // the host path root was opened at: Root() for go-git, which compares paths
	// worktree: this is a checkout's filesystem, not a git directory. A name with a .git
	// component is never written (git refuses such trees: a checked-out sub/.git could point Git
	// elsewhere), and a file rewritten is replaced by a new one, never written through, so a hard
	// link planted at its name keeps its content.
	worktree bool
	// gitDir: this is a repository's .git; go-git reads its files whole, so they are read
	// within gitlimit's caps.
	gitDir bool
}

// newGuardFS opens dir, an absolute path, as a worktree filesystem; Close releases it.
func newGuardFS(dir string) (*guardFS, error) {
	r, err := fsguard.Open(dir)
	if err != nil {
		return nil, err
	}
	return &guardFS{root: r, dir: dir, worktree: true}, nil
}

// writable refuses, in a worktree, a name that has a .git component (in any letter case).
func (g *guardFS) writable(name string) error {
	if !g.worktree {
		return nil
	}
	for _, c := range strings.Split(name, "/") {
		if strings.EqualFold(c, ".git") {
			return refused(name, fsguard.CodeInvalidArgument, "a checkout never writes a .git path")
		}
	}
	return nil
}

func (g *guardFS) Close() error { return g.root.Close() }

var _ billy.Filesystem = (*guardFS)(nil)
var _ billy.Chmod = (*guardFS)(nil)

// Files created without a mode, and parent directories created on the way, get those of osfs.
const (
	createMode = 0o666
	dirMode    = 0o755
)

// rel maps go-git's names of the root ("", "/") to fsguard's; everything else is checked by
// fsguard.Clean (no "..", no absolute path, no empty component).
func rel(name string) string {
	if name == "" || name == "/" {
		return "."
	}
	return name
}

// pathErr makes fsguard's errors ones go-git understands: os.IsNotExist and os.IsExist only
// see a syscall.Errno directly inside an *os.PathError. Other refusals keep their typed code
// (symlink_refused, path_escape) inside the PathError, where protocol.CodeOf finds it.
func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	switch fsguard.CodeOf(err) {
	case fsguard.CodeNotFound:
		err = syscall.ENOENT
	case fsguard.CodeExists, fsguard.CodeNotDirectory, "":
		if errors.As(err, &errno) {
			err = errno
		}
	}
	return &os.PathError{Op: op, Path: name, Err: err}
}

func refused(name, code, msg string) error {
	return &fsguard.Error{Code: code, Path: name, Message: msg}
}

func (g *guardFS) Create(name string) (billy.File, error) {
	return g.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, createMode)
}

// Open opens a regular file for reading; a symlink, directory or special file is refused.
func (g *guardFS) Open(name string) (billy.File, error) {
	f, err := g.root.Open(rel(name))
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return g.file(f, name)
}

// file wraps an open file, within its cap when it is a git directory's.
func (g *guardFS) file(f *os.File, name string) (*guardFile, error) {
	out := &guardFile{File: f, name: name}
	if g.gitDir {
		fi, err := f.Stat()
		if err == nil {
			out.lim, err = gitlimit.Limit(f, name, fi.Size())
		}
		if err != nil {
			f.Close()
			return nil, pathErr("open", name, err)
		}
	}
	return out, nil
}

// OpenFile opens name with flag, creating missing parent directories when flag has O_CREATE,
// as osfs does. The file is opened with O_NOFOLLOW in its resolved parent, so a symlink at the
// name is refused, never written through; anything but a regular file is refused too (O_NONBLOCK
// keeps opening a fifo from blocking).
func (g *guardFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC) == 0 {
		return g.Open(name)
	}
	if err := g.writable(name); err != nil {
		return nil, pathErr("open", name, err)
	}
	var f *os.File
	err := g.inParent(name, flag&os.O_CREATE != 0, func(pfd int, base string) error {
		if g.worktree && flag&os.O_TRUNC != 0 && flag&os.O_CREATE != 0 {
			// Replace, as git does: the old name goes and a new file is created exclusively (a
			// name planted meanwhile fails the create instead of being written through).
			if err := unix.Unlinkat(pfd, base, 0); err != nil && err != unix.ENOENT {
				return err
			}
			flag = flag&^os.O_TRUNC | os.O_EXCL
		}
		fd, err := -1, error(unix.EINTR)
		for err == unix.EINTR {
			fd, err = unix.Openat(pfd, base, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, uint32(perm.Perm()))
		}
		if err == unix.ELOOP {
			return refused(name, fsguard.CodeSymlinkRefused, "is a symlink, which is never written through")
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			err = refused(name, fsguard.CodeInvalidArgument, "not a regular file")
		}
		if err == nil {
			err = unix.SetNonblock(fd, false)
		}
		if err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return g.file(f, name)
}

// inParent resolves name's parent directory beneath the root (creating it first when mkdir is
// set and it is missing) and hands fn its descriptor and the final name.
func (g *guardFS) inParent(name string, mkdir bool, fn func(pfd int, base string) error) error {
	clean, err := fsguard.Clean(name)
	if err != nil {
		return err
	}
	if clean == "." {
		return refused(name, fsguard.CodeInvalidArgument, "operation needs a path below the root")
	}
	dir, base := ".", clean
	if i := strings.LastIndexByte(clean, '/'); i >= 0 {
		dir, base = clean[:i], clean[i+1:]
	}
	d, err := g.root.OpenDir(dir)
	if mkdir && errors.Is(err, fs.ErrNotExist) {
		if err = g.root.MkdirAll(dir, dirMode); err == nil {
			d, err = g.root.OpenDir(dir)
		}
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WithFD(func(fd int) error { return fn(fd, base) })
}

// ensureParent creates the missing parent directories of name (osfs does so for Symlink and
// Rename's destination).
func (g *guardFS) ensureParent(name string) error {
	if dir := path.Dir(name); dir != "." && dir != "/" {
		if _, err := g.root.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			return g.root.MkdirAll(dir, dirMode)
		}
	}
	return nil
}

// Stat is Lstat that refuses a symlink: this filesystem never follows one.
func (g *guardFS) Stat(name string) (os.FileInfo, error) {
	fi, err := g.Lstat(name)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, pathErr("stat", name, refused(name, fsguard.CodeSymlinkRefused, "is a symlink, which is never followed"))
	}
	return fi, err
}

func (g *guardFS) Lstat(name string) (os.FileInfo, error) {
	fi, err := g.root.Lstat(rel(name))
	if err != nil {
		return nil, pathErr("lstat", name, err)
	}
	return sysInfo(fi), nil
}

// ReadDir lists a directory sorted by name, each entry lstat'ed through the directory's
// descriptor.
func (g *guardFS) ReadDir(name string) ([]os.FileInfo, error) {
	ents, err := g.root.ReadDir(rel(name))
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	out := make([]os.FileInfo, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return nil, pathErr("readdir", name, err)
		}
		out = append(out, sysInfo(fi))
	}
	return out, nil
}

func (g *guardFS) MkdirAll(name string, perm os.FileMode) error {
	if err := g.writable(name); err != nil {
		return pathErr("mkdir", name, err)
	}
	return pathErr("mkdir", name, g.root.MkdirAll(rel(name), perm))
}

// Symlink creates link (and its missing parents) as a symlink to target, stored verbatim.
func (g *guardFS) Symlink(target, link string) error {
	if err := g.writable(link); err != nil {
		return pathErr("symlink", link, err)
	}
	if err := g.ensureParent(link); err != nil {
		return pathErr("symlink", link, err)
	}
	return pathErr("symlink", link, g.root.Symlink(target, link))
}

func (g *guardFS) Readlink(link string) (string, error) {
	t, err := g.root.Readlink(link)
	return t, pathErr("readlink", link, err)
}

// Remove removes a file, a symlink (the link itself) or an empty directory.
func (g *guardFS) Remove(name string) error {
	return pathErr("remove", name, g.root.Remove(name))
}

// Rename moves from to to, replacing a file there, as os.Rename does.
func (g *guardFS) Rename(from, to string) error {
	if err := g.writable(to); err != nil {
		return pathErr("rename", to, err)
	}
	if err := g.ensureParent(to); err != nil {
		return pathErr("rename", to, err)
	}
	return pathErr("rename", to, g.root.Rename(from, to, fsguard.RenameOptions{Replace: true}))
}

// Chmod sets a file's or directory's mode through its descriptor; a symlink is refused.
func (g *guardFS) Chmod(name string, mode os.FileMode) error {
	return pathErr("chmod", name, g.root.Chmod(rel(name), mode))
}

// TempFile creates a new file exclusively in dir (go-git's object store writes packs and loose
// objects this way, then renames them into place).
func (g *guardFS) TempFile(dir, prefix string) (billy.File, error) {
	for range 16 {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		name := path.Join(rel(dir), prefix+hex.EncodeToString(b))
		f, err := g.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, pathErr("tempfile", dir, syscall.EEXIST)
}

// sub opens the directory rel beneath the root as a filesystem of its own, pinned: what is at rel
// afterwards (a symlink swapped in) does not change where it reads and writes.
func (g *guardFS) sub(rel string) (*guardFS, error) {
	r, err := g.root.OpenDir(rel)
	if err != nil {
		return nil, pathErr("open", rel, err)
	}
	return &guardFS{root: r, dir: filepath.Join(g.dir, rel), gitDir: rel == git.GitDirName}, nil
}

func (g *guardFS) Chroot(string) (billy.Filesystem, error) { return nil, billy.ErrNotSupported }

func (g *guardFS) Join(elem ...string) string { return path.Join(elem...) }

func (g *guardFS) Root() string { return g.dir }

func (g *guardFS) Capabilities() billy.Capability {
	return billy.WriteCapability | billy.ReadCapability | billy.ReadAndWriteCapability |
		billy.SeekCapability | billy.TruncateCapability | billy.LockCapability
}

// guardFile is an open file; Name is the name it was opened by, as with osfs.
type guardFile struct {
	*os.File
	name string
	lim  *gitlimit.Reader // nil: no cap (a worktree file, or an object)
}

func (f *guardFile) Read(p []byte) (int, error) {
	if f.lim != nil {
		return f.lim.Read(p)
	}
	return f.File.Read(p)
}

func (f *guardFile) ReadAt(p []byte, off int64) (int, error) {
	if f.lim != nil {
		return f.lim.ReadAt(p, off)
	}
	return f.File.ReadAt(p, off)
}

// WriteTo shadows os.File's, through which io.Copy and bufio would read past the cap.
func (f *guardFile) WriteTo(w io.Writer) (int64, error) {
	if f.lim != nil {
		return io.Copy(w, struct{ io.Reader }{f.lim})
	}
	return f.File.WriteTo(w)
}

func (f *guardFile) Name() string  { return f.name }
func (f *guardFile) Lock() error   { return flock(f.File, unix.LOCK_EX) }
func (f *guardFile) Unlock() error { return flock(f.File, unix.LOCK_UN) }

func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Flock(int(fd), how) }); err != nil {
		return err
	}
	return ferr
}

// statInfo gives go-git the *syscall.Stat_t it reads ctime, device, inode and owner from (for
// the index's stat data, which lets Git's own `git status` trust it without rehashing); fsguard
// reports a *unix.Stat_t, a distinct type.
type statInfo struct {
	fs.FileInfo
	st syscall.Stat_t
}

func (i *statInfo) Sys() any { return &i.st }

func sysInfo(fi fs.FileInfo) fs.FileInfo {
	u, ok := fi.Sys().(*unix.Stat_t)
	if !ok {
		return fi
	}
	return &statInfo{FileInfo: fi, st: syscall.Stat_t{
		Dev: u.Dev, Ino: u.Ino, Nlink: u.Nlink, Mode: u.Mode, Uid: u.Uid, Gid: u.Gid, Rdev: u.Rdev,
		Size: u.Size, Blksize: u.Blksize, Blocks: u.Blocks,
		Atim: syscall.Timespec{Sec: u.Atim.Sec, Nsec: u.Atim.Nsec},
		Mtim: syscall.Timespec{Sec: u.Mtim.Sec, Nsec: u.Mtim.Nsec},
		Ctim: syscall.Timespec{Sec: u.Ctim.Sec, Nsec: u.Ctim.Nsec},
	}}
}
