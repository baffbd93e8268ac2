package gitstate

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/gitlimit"
)

// errReadOnly is what every mutating call of the filesystems below
// returns: inspecting and capturing Git state never writes.
var errReadOnly = errors.New("gitstate: read-only filesystem")

// guardFS is a read-only billy.Filesystem over a directory of an
// fsguard.Root, so go-git reads a workspace's worktree and .git through
// the guard: no symlink is ever followed, not even a final one (Stat is
// Lstat here), and nothing outside the root can be reached.
type guardFS struct {
	root *fsguard.Root
	base string // workspace-relative, cleaned
	// gitDir is the workspace-relative git directory when this filesystem is it (or below it):
	// its files are read within gitlimit's caps.
	gitDir string
}

func newGuardFS(root *fsguard.Root, base string) *guardFS {
	return &guardFS{root: root, base: base}
}

// newGitDirFS is newGuardFS for a git directory.
func newGitDirFS(root *fsguard.Root, gitDir string) *guardFS {
	return &guardFS{root: root, base: gitDir, gitDir: gitDir}
}

// rel maps a billy path (relative, possibly "" or with a leading slash)
// to a workspace-relative path below base.
func (g *guardFS) rel(op, name string) (string, error) {
	name = strings.Trim(filepath.ToSlash(name), "/")
	if name == "" || name == "." {
		return g.base, nil
	}
	clean, err := fsguard.Clean(name)
	if err != nil {
		return "", &os.PathError{Op: op, Path: name, Err: err}
	}
	return path.Join(g.base, clean), nil
}

// pathErr turns a guard error into an *os.PathError, because go-git tests
// errors with os.IsNotExist, which does not look inside other types.
func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
	}
	return &os.PathError{Op: op, Path: name, Err: err}
}

func (g *guardFS) Open(name string) (billy.File, error) {
	rel, err := g.rel("open", name)
	if err != nil {
		return nil, err
	}
	f, err := g.root.Open(rel)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	out := &roFile{File: f, name: name}
	if inGit, ok := strings.CutPrefix(rel, g.gitDir+"/"); g.gitDir != "" && ok {
		fi, err := f.Stat()
		if err == nil {
			out.lim, err = gitlimit.Limit(f, inGit, fi.Size())
		}
		if err != nil {
			f.Close()
			return nil, pathErr("open", name, err)
		}
	}
	return out, nil
}

func (g *guardFS) OpenFile(name string, flag int, _ os.FileMode) (billy.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: errReadOnly}
	}
	return g.Open(name)
}

func (g *guardFS) Stat(name string) (os.FileInfo, error) { return g.Lstat(name) }

func (g *guardFS) Lstat(name string) (os.FileInfo, error) {
	rel, err := g.rel("lstat", name)
	if err != nil {
		return nil, err
	}
	fi, err := g.root.Lstat(rel)
	if err != nil {
		return nil, pathErr("lstat", name, err)
	}
	return namedInfo{fi, path.Base(rel)}, nil
}

func (g *guardFS) ReadDir(name string) ([]os.FileInfo, error) {
	rel, err := g.rel("readdir", name)
	if err != nil {
		return nil, err
	}
	ents, err := g.root.ReadDir(rel)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	out := make([]os.FileInfo, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return nil, pathErr("readdir", name, err)
		}
		out = append(out, fi)
	}
	return out, nil
}

func (g *guardFS) Readlink(name string) (string, error) {
	rel, err := g.rel("readlink", name)
	if err != nil {
		return "", err
	}
	t, err := g.root.Readlink(rel)
	return t, pathErr("readlink", name, err)
}

func (g *guardFS) Join(elem ...string) string { return path.Join(elem...) }

func (g *guardFS) Chroot(p string) (billy.Filesystem, error) {
	rel, err := g.rel("chroot", p)
	if err != nil {
		return nil, err
	}
	return &guardFS{root: g.root, base: rel, gitDir: g.gitDir}, nil
}

func (g *guardFS) Root() string { return path.Join(g.root.Name(), g.base) }

func (g *guardFS) Create(name string) (billy.File, error) {
	return nil, &os.PathError{Op: "create", Path: name, Err: errReadOnly}
}
func (g *guardFS) Rename(from, _ string) error {
	return &os.PathError{Op: "rename", Path: from, Err: errReadOnly}
}
func (g *guardFS) Remove(name string) error {
	return &os.PathError{Op: "remove", Path: name, Err: errReadOnly}
}
func (g *guardFS) TempFile(dir, _ string) (billy.File, error) {
	return nil, &os.PathError{Op: "tempfile", Path: dir, Err: errReadOnly}
}
func (g *guardFS) MkdirAll(name string, _ os.FileMode) error {
	return &os.PathError{Op: "mkdir", Path: name, Err: errReadOnly}
}
func (g *guardFS) Symlink(_, link string) error {
	return &os.PathError{Op: "symlink", Path: link, Err: errReadOnly}
}

// namedInfo gives the root of a chroot a base name, as os.Stat would.
type namedInfo struct {
	fs.FileInfo
	name string
}

func (n namedInfo) Name() string { return n.name }

// roFile is a file of the guard opened for reading.
type roFile struct {
	*os.File
	name string
	lim  *gitlimit.Reader // nil: no cap (a worktree file, or an object)
}

func (f *roFile) Read(p []byte) (int, error) {
	if f.lim != nil {
		return f.lim.Read(p)
	}
	return f.File.Read(p)
}

func (f *roFile) ReadAt(p []byte, off int64) (int, error) {
	if f.lim != nil {
		return f.lim.ReadAt(p, off)
	}
	return f.File.ReadAt(p, off)
}

// WriteTo shadows os.File's, through which io.Copy and bufio would read past the cap.
func (f *roFile) WriteTo(w io.Writer) (int64, error) {
	if f.lim != nil {
		return io.Copy(w, struct{ io.Reader }{f.lim})
	}
	return f.File.WriteTo(w)
}

func (f *roFile) Name() string              { return f.name }
func (f *roFile) Lock() error               { return nil }
func (f *roFile) Unlock() error             { return nil }
func (f *roFile) Truncate(int64) error      { return errReadOnly }
func (f *roFile) Write([]byte) (int, error) { return 0, errReadOnly }
