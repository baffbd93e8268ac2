// Package gitops creates and updates the Git repository at a workspace root for the controller's
// Git operations (protocol.OpGitCheckout, OpGitInspect, OpGitReconcile).
//
// Everything but WorktreeAdd works without a git binary (go-git), because Docker sandboxes have
// none. Two rules hold throughout: a branch never moves in a way that drops commits (only a
// fast-forward, guarded by a compare-and-swap on the ref), and a tree with uncommitted work is
// never touched.
//
// The workspace's files are reached through guardFS, go-git's view of an fsguard.Root: every
// path is resolved beneath the workspace root without following any symlink, so a symlink
// committed or planted in the tree cannot send a write outside it. The git directory named by
// a linked worktree's .git file lies outside the root by construction (it is the base clone's)
// and is used where it says.
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

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
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
	fi, err := os.Lstat(root)
	if errors.Is(err, os.ErrNotExist) {
		return protocol.Errorf(protocol.CodeNotFound, "workspace root %s does not exist", root)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return protocol.Errorf(protocol.CodeNotDirectory, "workspace root %s is not a directory", root)
	}
	f, err := os.Open(root)
	if err != nil {
		return err
	}
	defer f.Close()
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
	// linked: the workspace's .git is a file naming a worktree directory of another repository
	// (a `git worktree add` checkout), whose refs and objects are shared with it.
	linked bool
	// root is the worktree; gitDir holds HEAD and the index, commonDir the refs, objects and
	// config (the same directory unless linked).
	root, gitDir, commonDir string
	// wt is the worktree's filesystem, and dot the pinned .git of a repository of the
	// workspace's own (nil when linked), open until close.
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

// open opens the repository whose worktree is root. A linked worktree's git directory and its
// common directory are read from where its .git file and commondir say, as Git does.
func open(root string, allowLinked bool) (*repo, error) {
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
	var dot, common billy.Filesystem
	switch {
	case fi.IsDir():
		// A repository inside the workspace is read and written through the guard, its .git
		// pinned by descriptor: a symlink planted or swapped in is refused, never followed.
		g, err := out.wt.sub(git.GitDirName)
		if err != nil {
			return nil, err
		}
		out.dot, dot = g, g
	case fi.Mode().IsRegular():
		if !allowLinked {
			return nil, protocol.Errorf(protocol.CodePathEscape, ".git is a file naming a git directory elsewhere, and this workspace is not a linked worktree")
		}
		gitdir, err := readGitFile(root, dotPath)
		if err != nil {
			return nil, err
		}
		dot = osfs.New(gitdir, osfs.WithBoundOS())
		out.linked = true
		out.gitDir = gitdir
	default:
		return nil, protocol.Errorf(protocol.CodeSymlinkRefused, ".git is neither a directory nor a file (a symlink is never followed)")
	}
	if common, err = commonDir(dot); err != nil {
		return nil, err
	}
	if common != nil && !out.linked {
		// Only a linked worktree's git directory names a common one; in a repository of the
		// workspace's own it could only lead the runner out of the workspace.
		return nil, protocol.Errorf(protocol.CodeCorrupt, ".git/commondir is set in a repository that is not a linked worktree")
	}
	repoFS := dot
	out.commonDir = out.gitDir
	if common != nil {
		repoFS = dotgit.NewRepositoryFilesystem(dot, common)
		out.commonDir = common.Root()
	}
	out.storage = filesystem.NewStorageWithOptions(repoFS, cache.NewObjectLRU(objectCacheSize), filesystem.Options{})
	out.Repository, err = git.Open(out.storage, out.wt)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeCorrupt, "open the repository: %v", err)
	}
	opened = true
	return out, nil
}

// readGitFile reads "gitdir: PATH" from a .git file; a relative PATH is relative to the
// worktree, as in Git.
func readGitFile(root, dotPath string) (string, error) {
	f, err := os.Open(dotPath)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	f.Close()
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	gitdir = strings.TrimSpace(gitdir)
	if !ok || gitdir == "" {
		return "", protocol.Errorf(protocol.CodeCorrupt, `.git file has no "gitdir:" line`)
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(root, gitdir)
	}
	gitdir = filepath.Clean(gitdir)
	if st, err := os.Stat(gitdir); err != nil || !st.IsDir() {
		return "", protocol.Errorf(protocol.CodeCorrupt, ".git names %s, which is not a directory", gitdir)
	}
	return gitdir, nil
}

// commonDir opens the directory a git directory's "commondir" file names (nil when it has none:
// not a linked worktree).
func commonDir(dot billy.Filesystem) (billy.Filesystem, error) {
	f, err := dot.Open("commondir")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	f.Close()
	if err != nil {
		return nil, err
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return nil, nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dot.Root(), p)
	}
	p = filepath.Clean(p)
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return nil, protocol.Errorf(protocol.CodeCorrupt, "commondir names %s, which is not a directory", p)
	}
	return osfs.New(p, osfs.WithBoundOS()), nil
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
