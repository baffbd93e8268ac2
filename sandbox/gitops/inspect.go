package gitops

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/gitstate"
)

// Inspect reads the repository at root: HEAD, its branch and upstream, the counts of staged,
// unstaged and untracked files, and how far HEAD is ahead of and behind baseCommit when the
// repository holds it, else the branch's upstream when it has one. It writes nothing.
func Inspect(ctx context.Context, root string, args protocol.GitInspectArgs) (protocol.GitStatus, error) {
	var base plumbing.Hash
	if args.BaseCommit != "" {
		var err error
		if base, err = parseCommit("base commit", args.BaseCommit); err != nil {
			return protocol.GitStatus{}, err
		}
	}
	r, err := open(root)
	if err != nil {
		return protocol.GitStatus{}, err
	}
	defer r.close()
	return inspect(ctx, r, base)
}

func inspect(ctx context.Context, r *repo, base plumbing.Hash) (protocol.GitStatus, error) {
	var out protocol.GitStatus
	head, branch, err := readHead(r)
	if err != nil {
		return out, err
	}
	out.Branch = branch.Short()
	if !head.IsZero() {
		out.Head = head.String()
	}
	up, upHash := upstream(r, branch)
	out.Upstream = up
	against := plumbing.ZeroHash
	if !base.IsZero() {
		if ok, err := hasCommit(r, base); err != nil {
			return out, err
		} else if ok {
			against = base
		}
	}
	if against.IsZero() {
		against = upHash
	}
	if !against.IsZero() && !head.IsZero() {
		out.BaseKnown = true
		if out.Ahead, out.Behind, err = gitstate.AheadBehind(ctx, r, head, against); err != nil {
			return out, err
		}
	}
	if err := countChanges(ctx, r, &out); err != nil {
		return out, err
	}
	return out, nil
}

// readHead returns HEAD's commit (zero in a repository without commits) and the branch HEAD is
// on ("" when detached).
func readHead(r *repo) (plumbing.Hash, plumbing.ReferenceName, error) {
	ref, err := r.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return plumbing.ZeroHash, "", protocol.Errorf(protocol.CodeCorrupt, "read HEAD: %v", err)
	}
	if ref.Type() == plumbing.HashReference {
		return ref.Hash(), "", nil
	}
	branch := ref.Target()
	res, err := r.Reference(branch, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, branch, nil // an unborn branch
	}
	if err != nil {
		return plumbing.ZeroHash, branch, protocol.Errorf(protocol.CodeCorrupt, "read %s: %v", branch, err)
	}
	return res.Hash(), branch, nil
}

// upstream returns the configured upstream of branch, as Git names it ("origin/main"), and its
// commit; "" and zero when none is configured or its ref does not exist. branch.<b>.merge is
// mapped through the remote's fetch refspecs, as Git does; remote "." names a local ref.
func upstream(r *repo, branch plumbing.ReferenceName) (string, plumbing.Hash) {
	if branch == "" {
		return "", plumbing.ZeroHash
	}
	cfg, err := r.Config()
	if err != nil {
		return "", plumbing.ZeroHash
	}
	up := gitstate.UpstreamRef(cfg, branch)
	if up == "" {
		return "", plumbing.ZeroHash
	}
	ref, err := r.Reference(up, true)
	if err != nil {
		return "", plumbing.ZeroHash
	}
	return up.Short(), ref.Hash()
}

// countChanges counts files as `git status` lists them: staged (index differs from HEAD),
// unstaged (worktree differs from the index) and untracked (not ignored). A file both staged and
// modified again counts in both.
func countChanges(ctx context.Context, r *repo, out *protocol.GitStatus) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := r.Worktree()
	if err != nil {
		return err
	}
	excl, err := r.excludes()
	if err != nil {
		return err
	}
	w.Excludes = append(w.Excludes, excl...)
	st, err := w.Status()
	if err != nil {
		return protocol.Errorf(protocol.CodeFailed, "git status: %v", err)
	}
	for _, fs := range st {
		switch {
		case fs.Worktree == git.Untracked:
			out.Untracked++
			continue
		case fs.Worktree != git.Unmodified:
			out.Unstaged++
		}
		if fs.Staging != git.Unmodified && fs.Staging != git.Untracked {
			out.Staged++
		}
	}
	return nil
}

// excludes reads info/exclude, which go-git's status leaves to its caller (it reads the
// .gitignore files itself).
func (r *repo) excludes() ([]gitignore.Pattern, error) {
	f, err := r.gitFiles().openFile(filepath.Join(r.gitDir, "info", "exclude"), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return gitstate.ParseExcludes(f)
}
