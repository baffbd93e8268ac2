package gitops

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/gitstate"
)

// Reconcile takes the base ref's new commit args.Commit into the repository at root. The pack,
// when not nil, carries objects the repository may lack. The commit is recorded as
// refs/remotes/origin/<BaseRef>.
//
// The checked-out branch is then fast-forwarded to the commit only when that drops nothing: the
// branch has no commit the base lacks, the tree has no uncommitted change (untracked files
// included), and HEAD is on a branch (a detached HEAD is never moved; it is reported as
// diverged when it is behind). Otherwise nothing else changes and the reply says why.
func Reconcile(ctx context.Context, root string, pack io.Reader, args protocol.GitReconcileArgs) (protocol.GitReconcileReply, error) {
	var out protocol.GitReconcileReply
	commit, err := checkReconcile(args)
	if err != nil {
		return out, err
	}
	r, err := open(root)
	if err != nil {
		return out, err
	}
	defer r.close()
	if pack != nil {
		// Through the pinned .git, as every other write of the runner's to the repository.
		if err := storePack(ctx, r.storage, pack); err != nil {
			return out, err
		}
	}
	if ok, err := hasCommit(r, commit); err != nil {
		return out, err
	} else if !ok {
		return out, protocol.Errorf(protocol.CodeNotFound, "base commit %s is not in the repository", commit)
	}
	if err := setRef(r, originRef(args.BaseRef), commit); err != nil {
		return out, fmt.Errorf("record %s: %w", originRef(args.BaseRef), err)
	}
	head, branch, err := readHead(r)
	if err != nil {
		return out, err
	}
	if head.IsZero() {
		return out, protocol.Errorf(protocol.CodeConflict, "HEAD has no commit yet; nothing to reconcile")
	}
	out.Before, out.After = head.String(), head.String()
	if out.Ahead, out.Behind, err = gitstate.AheadBehind(ctx, r, head, commit); err != nil {
		return out, err
	}
	switch {
	case out.Behind == 0 && out.Ahead > 0:
		out.Action = protocol.GitAhead
		return out, nil
	case out.Behind == 0:
		out.Action = protocol.GitUpToDate
		return out, nil
	case out.Ahead > 0:
		out.Action = protocol.GitDiverged
		return out, nil
	}
	if branch == "" {
		// Moving a detached HEAD would leave its commits to whoever remembers them.
		out.Action = protocol.GitDiverged
		if clean, err := isClean(ctx, r); err != nil {
			return out, err
		} else if !clean {
			out.Action = protocol.GitDirty
		}
		return out, nil
	}
	// The counts rest on commit dates; moving the branch rests on reachability alone.
	if ok, err := gitstate.Reachable(ctx, r, commit, head); err != nil {
		return out, err
	} else if !ok {
		out.Action = protocol.GitDiverged
		return out, nil
	}
	moved, err := fastForward(ctx, r, branch, head, commit)
	if err != nil {
		return out, err
	}
	if !moved {
		out.Action = protocol.GitDirty
		return out, nil
	}
	out.After, out.Ahead, out.Behind = commit.String(), 0, 0
	out.Action = protocol.GitFastForwarded
	return out, nil
}

// isClean says whether the tree has no staged, unstaged or untracked (not ignored) file.
func isClean(ctx context.Context, r *repo) (bool, error) {
	var st protocol.GitStatus
	if err := countChanges(ctx, r, &st); err != nil {
		return false, err
	}
	return st.Clean(), nil
}

// CheckReconcile refuses bad arguments before any pack is read.
func CheckReconcile(args protocol.GitReconcileArgs) error {
	_, err := checkReconcile(args)
	return err
}

func checkReconcile(args protocol.GitReconcileArgs) (plumbing.Hash, error) {
	if err := CheckRefName("base ref", args.BaseRef); err != nil {
		return plumbing.ZeroHash, err
	}
	return parseCommit("commit", args.Commit)
}

// fastForward moves branch from head to commit, with its index and files, when the tree is
// clean (moved false when it is not). It works under Git's own locks (index.lock, then the ref's
// .lock), so a git command started meanwhile fails instead of interleaving, and checks under them
// that the branch has not moved and the tree is still clean: git add or git commit cannot slip in
// between the check and the move. The files move first and the ref last, as in
// `git merge --ff-only`: a failure half-way leaves the branch where it was and the difference
// visible as uncommitted changes, never a commit lost.
func fastForward(ctx context.Context, r *repo, branch plumbing.ReferenceName, head, commit plumbing.Hash) (moved bool, err error) {
	files := r.gitFiles()
	idxLock, err := lockFile(files, filepath.Join(r.gitDir, "index"))
	if err != nil {
		return false, err
	}
	defer idxLock.release()
	refPath := filepath.Join(r.gitDir, filepath.FromSlash(branch.String()))
	if err := files.mkdirAll(filepath.Dir(refPath)); err != nil {
		return false, err
	}
	refLock, err := lockFile(files, refPath)
	if err != nil {
		return false, err
	}
	defer refLock.release()
	if cur, err := r.Reference(branch, true); err != nil || cur.Hash() != head {
		return false, protocol.Errorf(protocol.CodeGitBusy, "%s moved while reconciling; nothing was changed, try again", branch.Short())
	}
	if clean, err := isClean(ctx, r); err != nil || !clean {
		return false, err
	}

	s := &ffStorer{Storage: r.storage, branch: branch, target: commit}
	ff, err := git.Open(s, r.wt)
	if err != nil {
		return false, err
	}
	w, err := ff.Worktree()
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	// MergeReset rewrites only the files that differ between the two commits, and checks once
	// more, right before, that no file was edited since: an edit makes the tree dirty again.
	if err := w.Reset(&git.ResetOptions{Commit: commit, Mode: git.MergeReset}); err != nil {
		if errors.Is(err, git.ErrUnstagedChanges) {
			return false, nil
		}
		return false, missingObjects("fast-forward to "+commit.String(), err)
	}
	if !s.refAsked || s.idx == nil {
		return false, fmt.Errorf("fast-forward: go-git did not update %s", branch)
	}
	if err := idxLock.commit(func(f io.Writer) error {
		bw := bufio.NewWriter(f)
		if err := index.NewEncoder(bw).Encode(s.idx); err != nil {
			return err
		}
		return bw.Flush()
	}); err != nil {
		return false, fmt.Errorf("write the index: %w", err)
	}
	if err := refLock.commit(func(f io.Writer) error {
		_, err := fmt.Fprintf(f, "%s\n", commit)
		return err
	}); err != nil {
		return false, fmt.Errorf("move %s: %w", branch, err)
	}
	if logRefs(r) {
		msg := "tether: fast-forward to the base"
		appendReflog(files, filepath.Join(r.gitDir, "logs", filepath.FromSlash(branch.String())), head, commit, msg)
		appendReflog(files, filepath.Join(r.gitDir, "logs", "HEAD"), head, commit, msg)
	}
	return true, nil
}

// logRefs says whether Git would log this update: core.logAllRefUpdates, which defaults to true
// in a repository with a worktree.
func logRefs(r *repo) bool {
	cfg, err := r.Config()
	if err != nil {
		return false
	}
	v := strings.ToLower(cfg.Raw.Section("core").Option("logallrefupdates"))
	return v != "false" && v != "no" && v != "off" && v != "0"
}

// ffStorer lets go-git's reset compute and write the fast-forward without publishing it: the
// index is kept in memory and the branch update is only recorded, both published afterwards
// under Git's locks. Any other ref update (HEAD moved to another branch meanwhile) is refused.
type ffStorer struct {
	*filesystem.Storage
	branch   plumbing.ReferenceName
	target   plumbing.Hash
	refAsked bool
	idx      *index.Index
}

func (s *ffStorer) SetReference(ref *plumbing.Reference) error {
	if ref.Name() != s.branch || ref.Type() != plumbing.HashReference || ref.Hash() != s.target {
		return protocol.Errorf(protocol.CodeGitBusy, "HEAD moved while reconciling; nothing was moved")
	}
	s.refAsked = true
	return nil
}

func (s *ffStorer) CheckAndSetReference(ref, _ *plumbing.Reference) error { return s.SetReference(ref) }

func (s *ffStorer) Index() (*index.Index, error) {
	if s.idx != nil {
		return s.idx, nil
	}
	return s.Storage.Index()
}

func (s *ffStorer) SetIndex(idx *index.Index) error {
	s.idx = idx
	return nil
}

// setRef points name at h under Git's lock on the ref.
func setRef(r *repo, name plumbing.ReferenceName, h plumbing.Hash) error {
	files := r.gitFiles()
	p := filepath.Join(r.gitDir, filepath.FromSlash(name.String()))
	if err := files.mkdirAll(filepath.Dir(p)); err != nil {
		return err
	}
	l, err := lockFile(files, p)
	if err != nil {
		return err
	}
	defer l.release()
	return l.commit(func(f io.Writer) error {
		_, err := fmt.Fprintf(f, "%s\n", h)
		return err
	})
}

// gitLock is Git's lock on a file: NAME.lock created exclusively, written, then renamed over
// NAME. Git takes the same lock, so the two never write at once.
type gitLock struct {
	files gitFiles
	name  string
	f     billy.File
	done  bool
}

func lockFile(files gitFiles, name string) (*gitLock, error) {
	f, err := files.openFile(name+".lock", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, protocol.Errorf(protocol.CodeGitBusy, "%s.lock exists: a Git command is running (or crashed; remove the lock if no git process is running)", filepath.Base(name))
	}
	if err != nil {
		return nil, err
	}
	return &gitLock{files: files, name: name, f: f}, nil
}

// commit writes the new content into the lock file and renames it into place.
func (l *gitLock) commit(write func(io.Writer) error) error {
	err := write(l.f)
	if s, ok := l.f.(interface{ Sync() error }); ok && err == nil {
		err = s.Sync()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.files.rename(l.name+".lock", l.name)
	}
	if err != nil {
		return err
	}
	l.done = true
	return nil
}

func (l *gitLock) release() {
	if l.done {
		return
	}
	l.f.Close()
	_ = l.files.remove(l.name + ".lock")
}

// appendReflog adds the move to a reflog, so `git reflog` shows where the branch was. It is
// best effort: a reflog is a convenience, the move is done.
func appendReflog(files gitFiles, name string, from, to plumbing.Hash, msg string) {
	if err := files.mkdirAll(filepath.Dir(name)); err != nil {
		return
	}
	f, err := files.openFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	now := time.Now()
	_, tz := now.Zone()
	sign := '+'
	if tz < 0 {
		sign, tz = '-', -tz
	}
	fmt.Fprintf(f, "%s %s tether <tether@localhost> %d %c%02d%02d\t%s\n", from, to, now.Unix(), sign, tz/3600, tz%3600/60, msg)
}
