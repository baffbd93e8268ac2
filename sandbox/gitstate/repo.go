package gitstate

import (
	"errors"
	"fmt"
	fs2 "io/fs"
	"os"
	"path"

	"github.com/go-git/go-billy/v5"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/gitlimit"
)

// objectCacheSize bounds go-git's object cache (its default is 96 MiB);
// the runner's whole budget is 64 MiB.
const objectCacheSize = 8 * cache.MiByte

// Error is a typed failure to read a repository. Its codes are those of
// the wire protocol (ErrorCode).
type Error struct {
	Code    string
	Path    string
	Message string
	Err     error
	// NotFollowed is set when the repository names a directory elsewhere
	// (a .git file, commondir, alternates) that this package does not
	// follow, because it may lie outside the workspace.
	NotFollowed bool
}

// CodeUnsupported marks a repository layout this package does not read.
const CodeUnsupported = "unsupported"

func (e *Error) Error() string {
	s := e.Code
	if e.Path != "" {
		s += ": " + e.Path
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error     { return e.Err }
func (e *Error) ErrorCode() string { return e.Code }

// IsNotFollowed reports whether err says that the repository names a
// directory elsewhere that was not followed.
func IsNotFollowed(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.NotFollowed
}

// Repo is a repository opened read-only for inspection or capture.
type Repo struct {
	Repo    *git.Repository
	Storage *filesystem.Storage
	// GitDir is the workspace's .git directory, read through the guard.
	GitDir billy.Filesystem
}

// Names inside a .git directory that point somewhere else: Git would
// follow them, this package does not (see Open).
const (
	commondirPath  = "commondir"
	alternatesPath = "objects/info/alternates"
)

// Open opens the repository whose worktree is dir (workspace-relative).
// It returns nil, nil when dir has no .git. Everything is read through the
// guard, below the workspace root, and nothing else is ever read: a .git
// that is a file ("gitdir: PATH", a linked worktree or a separate git
// directory), a .git directory with a commondir file and one that borrows
// objects through objects/info/alternates all name directories that may
// lie outside the workspace, so Open refuses them with a typed
// CodeUnsupported error (NotFollowed set) instead of following the paths
// they hold.
func Open(root *fsguard.Root, dir string) (*Repo, error) {
	clean, err := fsguard.Clean(dir)
	if err != nil {
		return nil, err
	}
	dotRel := path.Join(clean, ".git")
	fi, err := root.Lstat(dotRel)
	if errors.Is(err, fs2.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode().IsRegular():
		return nil, &Error{Code: CodeUnsupported, Path: dotRel, NotFollowed: true,
			Message: "a .git file (linked worktree) is not followed: its git directory may lie outside the workspace"}
	case !fi.IsDir():
		return nil, &Error{Code: CodeUnsupported, Path: dotRel, Message: "the .git entry is neither a directory nor a file (a symlink is never followed)"}
	}
	for _, p := range []struct{ name, what string }{
		{commondirPath, "its common directory"},
		{alternatesPath, "the object directories it lists"},
	} {
		rel := path.Join(dotRel, p.name)
		_, err := root.Lstat(rel)
		if err == nil {
			return nil, &Error{Code: CodeUnsupported, Path: rel, NotFollowed: true,
				Message: p.name + " is not followed: " + p.what + " may lie outside the workspace"}
		}
		if !errors.Is(err, fs2.ErrNotExist) && fsguard.CodeOf(err) != fsguard.CodeNotDirectory {
			return nil, err
		}
	}
	// go-git hides a failed read of HEAD as "repository does not exist": say why first.
	if fi, err := root.Lstat(path.Join(dotRel, "HEAD")); err == nil {
		if err := gitlimit.CheckSize("HEAD", fi.Size()); err != nil {
			return nil, fmt.Errorf("open repository %s: %w", dotRel, err)
		}
	}
	r := &Repo{GitDir: newGitDirFS(root, dotRel)}
	// go-git reads objects/info/alternates by itself when an object is
	// missing; one written after the check above names nothing it can
	// open (noAlternates), so the object is simply missing.
	r.Storage = filesystem.NewStorageWithOptions(r.GitDir, cache.NewObjectLRU(objectCacheSize),
		filesystem.Options{AlternatesFS: noAlternates{}})
	r.Repo, err = git.Open(r.Storage, newGuardFS(root, clean))
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", dotRel, err)
	}
	return r, nil
}

// errNotFollowed is what noAlternates answers.
var errNotFollowed = errors.New("gitstate: alternate object directories are not followed")

// noAlternates is the filesystem go-git resolves the entries of
// objects/info/alternates in: it holds nothing, so no entry is followed.
// go-git (v5.19) calls only Stat and Chroot on it; the other reads fail
// as well, and the embedded interface is nil: a write would panic, none is
// ever made.
type noAlternates struct{ billy.Filesystem }

func (noAlternates) Stat(name string) (os.FileInfo, error) {
	return nil, &os.PathError{Op: "stat", Path: name, Err: errNotFollowed}
}
func (noAlternates) Lstat(name string) (os.FileInfo, error) {
	return nil, &os.PathError{Op: "lstat", Path: name, Err: errNotFollowed}
}
func (noAlternates) Chroot(name string) (billy.Filesystem, error) {
	return nil, &os.PathError{Op: "chroot", Path: name, Err: errNotFollowed}
}
func (noAlternates) Open(name string) (billy.File, error) {
	return nil, &os.PathError{Op: "open", Path: name, Err: errNotFollowed}
}
func (noAlternates) OpenFile(name string, _ int, _ os.FileMode) (billy.File, error) {
	return nil, &os.PathError{Op: "open", Path: name, Err: errNotFollowed}
}
func (noAlternates) ReadDir(name string) ([]os.FileInfo, error) {
	return nil, &os.PathError{Op: "readdir", Path: name, Err: errNotFollowed}
}
func (noAlternates) Root() string               { return "/nonexistent" }
func (noAlternates) Join(elem ...string) string { return path.Join(elem...) }
