package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/internal/ctxio"
)

// objectCacheSize bounds go-git's object cache (its default is 96 MiB); the runner's whole
// memory budget is 64 MiB (see sandbox/gitstate).
const objectCacheSize = 8 * cache.MiByte

// CheckRefName refuses a branch or base ref name Git would refuse, and the ones that would turn
// into something else on a command line or in a message: empty, a leading "-", "..", spaces and
// control characters, "HEAD", and whatever `git check-ref-format` rejects.
func CheckRefName(kind, name string) error {
	bad := func(why string) error {
		return protocol.Errorf(protocol.CodeInvalidArgument, "%s %q: %s", kind, name, why)
	}
	switch {
	case name == "":
		return protocol.Errorf(protocol.CodeInvalidArgument, "%s name is empty", kind)
	case strings.HasPrefix(name, "-"):
		return bad("must not start with '-'")
	case strings.Contains(name, ".."):
		return bad(`must not contain ".."`)
	case name == "HEAD" || name == "@":
		return bad("is reserved by Git")
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return bad("must not start or end with '/'")
	}
	for _, c := range name {
		if unicode.IsSpace(c) || unicode.IsControl(c) || c == 0x7f {
			return bad("must not contain spaces or control characters")
		}
	}
	if err := plumbing.NewBranchReferenceName(name).Validate(); err != nil {
		return bad("not a valid Git ref name")
	}
	return nil
}

// parseCommit checks a full 40-hex object id.
func parseCommit(what, id string) (plumbing.Hash, error) {
	if len(id) != 40 || !plumbing.IsHash(id) {
		return plumbing.ZeroHash, protocol.Errorf(protocol.CodeInvalidArgument, "%s %q is not a full 40-hex commit id", what, id)
	}
	return plumbing.NewHash(strings.ToLower(id)), nil
}

// checkEmptyDir says whether root is an existing, empty directory (it is refused otherwise:
// a checkout never lands on top of files it would then be blamed for).
func checkEmptyDir(root string) error {
	if !filepath.IsAbs(root) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "workspace root %q is not absolute", root)
	}
	// Opened, then looked at through the descriptor: a confined runner names its root
	// /proc/self/fd/N (a magic link that Lstat would call a symlink).
	f, err := os.Open(root)
	if errors.Is(err, os.ErrNotExist) {
		return protocol.Errorf(protocol.CodeNotFound, "workspace root %s does not exist", root)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if !fi.IsDir() {
		return protocol.Errorf(protocol.CodeNotDirectory, "workspace root %s is not a directory", root)
	}
	names, err := f.Readdirnames(1)
	if err != nil && err != io.EOF {
		return err
	}
	if len(names) > 0 {
		return protocol.Errorf(protocol.CodeConflict, "workspace root %s is not empty: a checkout needs an empty directory", root)
	}
	return nil
}

// emptyDir removes everything inside root, which was empty when the operation began: whatever
// is there now is what the failed operation created.
func emptyDir(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
	}
}

// repo is a workspace repository opened for one operation.
type repo struct {
	*git.Repository
	storage *filesystem.Storage
	// root is the worktree and gitDir its .git, which holds HEAD, the index, refs, objects and
	// config.
	root, gitDir string
	// wt is the worktree's filesystem and dot the pinned .git, open until close.
	wt, dot *guardFS
}

func (r *repo) close() {
	if r.dot != nil {
		r.dot.Close()
	}
	if r.wt != nil {
		r.wt.Close()
	}
}

// open opens the repository whose worktree is root and whose git directory is root/.git.
func open(root string) (*repo, error) {
	if !filepath.IsAbs(root) {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "workspace root %q is not absolute", root)
	}
	dotPath := filepath.Join(root, git.GitDirName)
	fi, err := os.Lstat(dotPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no Git repository at the workspace root (no .git)")
	}
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode().IsRegular():
		return nil, protocol.Errorf(protocol.CodePathEscape, ".git is a file naming a git directory elsewhere: only a repository inside the workspace is used")
	case !fi.IsDir():
		return nil, protocol.Errorf(protocol.CodeSymlinkRefused, ".git is neither a directory nor a file (a symlink is never followed)")
	}
	out := &repo{root: root, gitDir: dotPath}
	if out.wt, err = newGuardFS(root); err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			out.close()
		}
	}()
	// The repository is read and written through the guard, its .git pinned by descriptor: a
	// symlink planted or swapped in is refused, never followed.
	if out.dot, err = out.wt.sub(git.GitDirName); err != nil {
		return nil, err
	}
	if _, err := out.dot.Lstat("commondir"); err == nil {
		// Only a linked worktree's git directory names a common one; here it could only lead
		// the runner out of the workspace.
		return nil, protocol.Errorf(protocol.CodeCorrupt, ".git/commondir is set: only a repository of the workspace's own is used")
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	out.storage = filesystem.NewStorageWithOptions(out.dot, cache.NewObjectLRU(objectCacheSize), filesystem.Options{})
	out.Repository, err = git.Open(out.storage, out.wt)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeCorrupt, "open the repository: %v", err)
	}
	opened = true
	return out, nil
}

// storePack adds a pack's objects to the repository. The pack must be self-contained (not
// `--thin`): go-git indexes it on its own, without resolving deltas against objects the
// repository already has.
func storePack(ctx context.Context, s *filesystem.Storage, pack io.Reader) error {
	err := packfile.UpdateObjectStorage(s, ctxio.Reader{Ctx: ctx, R: pack})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		if protocol.CodeOf(err) != protocol.CodeInternal {
			return err
		}
		return protocol.Errorf(protocol.CodeCorrupt, "store the pack: %v", err)
	}
	return nil
}

// hasCommit says whether the repository holds commit h.
func hasCommit(r *repo, h plumbing.Hash) (bool, error) {
	_, err := r.CommitObject(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, protocol.Errorf(protocol.CodeCorrupt, "read commit %s: %v", h, err)
	}
	return true, nil
}

// missingObjects turns go-git's "object not found" met while checking out into a typed error:
// the pack did not hold every object the commit needs.
func missingObjects(what string, err error) error {
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return protocol.Errorf(protocol.CodeCorrupt, "%s: the repository lacks objects the commit needs: %v", what, err)
	}
	if protocol.CodeOf(err) != protocol.CodeInternal {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
