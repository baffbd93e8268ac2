package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/tetherhq/tether/protocol"
)

// SwitchBranch creates args.Branch at HEAD's commit and points HEAD at it. The index and the
// working tree are left as they are: the commit is the same, so staged, unstaged and untracked
// work stays exactly as it was, now on the new branch. A branch of that name that exists already
// is refused (conflict) and nothing changes.
func SwitchBranch(ctx context.Context, root string, args protocol.GitBranchArgs) (protocol.GitStatus, error) {
	if err := CheckRefName("branch", args.Branch); err != nil {
		return protocol.GitStatus{}, err
	}
	r, err := open(root)
	if err != nil {
		return protocol.GitStatus{}, err
	}
	defer r.close()
	head, _, err := readHead(r)
	if err != nil {
		return protocol.GitStatus{}, err
	}
	if head.IsZero() {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeConflict, "HEAD has no commit yet; no branch can start there")
	}
	name := plumbing.NewBranchReferenceName(args.Branch)
	if _, err := r.Reference(name, false); err == nil {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeConflict, "branch %q exists already", args.Branch)
	} else if !errors.Is(err, plumbing.ErrReferenceNotFound) {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeCorrupt, "read %s: %v", name, err)
	}
	if err := setRef(r, name, head); err != nil {
		return protocol.GitStatus{}, fmt.Errorf("create %s: %w", name, err)
	}
	// HEAD is written under Git's own lock on it, through the pinned .git like every other write.
	l, err := lockFile(r.gitFiles(), filepath.Join(r.gitDir, plumbing.HEAD.String()))
	if err != nil {
		return protocol.GitStatus{}, err
	}
	defer l.release()
	if err := l.commit(func(f io.Writer) error {
		_, err := fmt.Fprintf(f, "ref: %s\n", name)
		return err
	}); err != nil {
		return protocol.GitStatus{}, fmt.Errorf("point HEAD at %s: %w", name, err)
	}
	return inspect(ctx, r, plumbing.ZeroHash)
}
