package gitstate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	fs2 "io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

const alternatesPath = "objects/info/alternates"

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
}

// CodeUnsupported marks a repository layout this package cannot read or
// normalize.
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

// Repo is a repository opened read-only for inspection or capture.
type Repo struct {
	Repo    *git.Repository
	Storage *filesystem.Storage
	// GitDir is the worktree's own git directory (HEAD, index) and Common
	// the directory holding config, refs and objects. They are the same
	// unless the workspace is a linked worktree.
	GitDir, Common billy.Filesystem
	// Linked is set when the workspace's .git is a file naming a git
	// directory ("gitdir: ..."), usually outside the workspace.
	Linked bool
	// Alternates lists the absolute object directories the repository
	// borrows objects from (objects/info/alternates).
	Alternates []string
	// GitDirPath and CommonPath are host paths, for messages and for
	// reading lock files; the .git directory of a plain repository is
	// still only read through the guard.
	GitDirPath, CommonPath string

	// Store reads objects from the repository and then its alternates;
	// Repo is built on it.
	Store storage.Storer
	alts  []*filesystem.Storage
	cache cache.Object
}

// Open opens the repository whose worktree is dir (workspace-relative).
// It returns nil, nil when dir has no .git. The worktree and a .git
// directory inside the workspace are read through the guard; the git
// directory named by a .git file and alternate object directories lie
// outside the root by construction and are read (never written) on the
// host paths they name.
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
	r := &Repo{cache: cache.NewObjectLRU(objectCacheSize)}
	switch {
	case fi.IsDir():
		g := newGuardFS(root, dotRel)
		r.GitDir, r.Common = g, g
		r.GitDirPath = filepath.Join(root.Name(), dotRel)
		r.CommonPath = r.GitDirPath
	case fi.Mode().IsRegular():
		if err := r.openLinked(root, clean, dotRel); err != nil {
			return nil, err
		}
	default:
		return nil, &Error{Code: CodeUnsupported, Path: dotRel, Message: "the .git entry is neither a directory nor a file (a symlink is never followed)"}
	}
	if err := r.readAlternates(); err != nil {
		return nil, err
	}
	repoFS := r.Common
	if r.Linked {
		repoFS = dotgit.NewRepositoryFilesystem(r.GitDir, r.Common)
	}
	r.Storage = filesystem.NewStorageWithOptions(repoFS, r.cache, filesystem.Options{})
	r.Store = r.Storage
	if len(r.alts) > 0 {
		r.Store = &objectDB{Storage: r.Storage, alts: r.alts}
	}
	r.Repo, err = git.Open(r.Store, newGuardFS(root, clean))
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", dotRel, err)
	}
	return r, nil
}

// openLinked follows a .git file: "gitdir: PATH", PATH relative to the
// worktree; the git directory's "commondir" names the shared directory.
func (r *Repo) openLinked(root *fsguard.Root, clean, dotRel string) error {
	f, err := root.Open(dotRel)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", dotRel, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	gitdir = strings.TrimSpace(gitdir)
	if !ok || gitdir == "" {
		return &Error{Code: CodeUnsupported, Path: dotRel, Message: `.git file has no "gitdir:" line`}
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(root.Name(), clean, gitdir)
	}
	gitdir = filepath.Clean(gitdir)
	if st, err := os.Stat(gitdir); err != nil || !st.IsDir() {
		return &Error{Code: CodeUnsupported, Path: dotRel, Message: "gitdir " + gitdir + " is not a directory", Err: err}
	}
	r.Linked = true
	r.GitDirPath, r.CommonPath = gitdir, gitdir
	if b, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		r.CommonPath = filepath.Clean(common)
	} else if !errors.Is(err, fs2.ErrNotExist) {
		return err
	}
	r.GitDir = &hostFS{dir: r.GitDirPath}
	r.Common = &hostFS{dir: r.CommonPath}
	return nil
}

// maxAlternateDepth is how deep alternates of alternates are followed,
// as in Git.
const maxAlternateDepth = 5

// readAlternates opens the object directories listed in
// objects/info/alternates (relative entries are relative to the objects
// directory, as in Git) and hides the file from go-git, whose own
// handling resolves relative entries against the wrong directory and
// re-reads every pack index of an alternate on each lookup.
func (r *Repo) readAlternates() error {
	paths, err := readAlternatesFile(r.Common, filepath.Join(r.CommonPath, "objects"))
	if err != nil || paths == nil {
		return err
	}
	r.Common = &altFS{Filesystem: r.Common, content: []byte{}}
	if r.GitDirPath == r.CommonPath {
		r.GitDir = r.Common
	}
	seen := map[string]bool{}
	var open func(paths []string, depth int) error
	open = func(paths []string, depth int) error {
		for _, p := range paths {
			if seen[p] {
				continue
			}
			seen[p] = true
			if st, err := os.Stat(p); err != nil || !st.IsDir() {
				return &Error{Code: CodeUnsupported, Path: alternatesPath, Message: "alternate object directory " + p + " is not a directory", Err: err}
			}
			r.Alternates = append(r.Alternates, p)
			fs := &altFS{Filesystem: &hostFS{dir: p, objectsOnly: true}, content: []byte{}}
			r.alts = append(r.alts, filesystem.NewStorageWithOptions(fs, r.cache, filesystem.Options{}))
			if depth+1 >= maxAlternateDepth {
				continue
			}
			more, err := readAlternatesFile(&hostFS{dir: p, objectsOnly: true}, p)
			if err != nil {
				return err
			}
			if err := open(more, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return open(paths, 0)
}

// readAlternatesFile returns the absolute entries of objects/info/alternates
// in fs, whose objects directory is at the host path objects; nil when
// there is no such file.
func readAlternatesFile(fs billy.Filesystem, objects string) ([]string, error) {
	f, err := fs.Open(alternatesPath)
	if errors.Is(err, fs2.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	paths := []string{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !filepath.IsAbs(line) {
			line = filepath.Join(objects, line)
		}
		paths = append(paths, filepath.Clean(line))
	}
	return paths, sc.Err()
}

// objectDB looks objects up in the repository, then in each alternate.
type objectDB struct {
	*filesystem.Storage
	alts []*filesystem.Storage
}

func (s *objectDB) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := s.Storage.EncodedObject(t, h)
	for _, a := range s.alts {
		if err != plumbing.ErrObjectNotFound {
			break
		}
		o, err = a.EncodedObject(t, h)
	}
	return o, err
}

func (s *objectDB) HasEncodedObject(h plumbing.Hash) error {
	err := s.Storage.HasEncodedObject(h)
	for _, a := range s.alts {
		if err != plumbing.ErrObjectNotFound {
			break
		}
		err = a.HasEncodedObject(h)
	}
	return err
}

func (s *objectDB) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	n, err := s.Storage.EncodedObjectSize(h)
	for _, a := range s.alts {
		if err != plumbing.ErrObjectNotFound {
			break
		}
		n, err = a.EncodedObjectSize(h)
	}
	return n, err
}
