package gitstate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

// State is a summary of a repository's state, as `git status --branch`
// would describe it.
type State struct {
	// Head is the commit HEAD points at; empty on an unborn branch.
	Head string `json:"head"`
	// Branch is the checked-out branch's short name; empty when detached.
	Branch   string `json:"branch,omitempty"`
	Detached bool   `json:"detached,omitempty"`
	// Upstream is the branch's upstream as Git shortens it ("origin/main").
	Upstream string `json:"upstream,omitempty"`
	// Ahead and Behind count commits reachable from HEAD and not from the
	// upstream, and the reverse.
	Ahead  int `json:"ahead"`
	Behind int `json:"behind"`
	// Staged, Unstaged and Untracked count paths; Dirty is set when any
	// of them is not zero.
	Staged    int  `json:"staged"`
	Unstaged  int  `json:"unstaged"`
	Untracked int  `json:"untracked"`
	Dirty     bool `json:"dirty"`
}

// Inspect reads the state of the repository whose worktree is dir
// (workspace-relative, "." for the root). It returns nil, nil when dir has
// no .git.
func Inspect(root *fsguard.Root, dir string) (*State, error) {
	r, err := Open(root, dir)
	if r == nil || err != nil {
		return nil, err
	}
	return r.State()
}

// State computes the repository's state.
func (r *Repo) State() (*State, error) {
	st := &State{}
	head, err := r.Storage.Reference(plumbing.HEAD)
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w", err)
	}
	var headHash plumbing.Hash
	if head.Type() == plumbing.SymbolicReference {
		st.Branch = head.Target().Short()
		ref, err := r.Repo.Reference(head.Target(), true)
		switch {
		case err == nil:
			headHash = ref.Hash()
		case !errors.Is(err, plumbing.ErrReferenceNotFound):
			return nil, fmt.Errorf("resolve HEAD: %w", err)
		}
	} else {
		st.Detached = true
		headHash = head.Hash()
		if headHash.IsZero() {
			return nil, &Error{Code: CodeUnsupported, Path: "HEAD", Message: "HEAD names neither a branch nor a commit"}
		}
	}
	if !headHash.IsZero() {
		st.Head = headHash.String()
	}
	if st.Branch != "" {
		if err := r.upstream(st, head.Target(), headHash); err != nil {
			return nil, err
		}
	}
	if err := r.status(st); err != nil {
		return nil, err
	}
	return st, nil
}

// upstream fills Upstream, Ahead and Behind from branch.<b>.remote and
// branch.<b>.merge, mapped through the remote's fetch refspecs.
func (r *Repo) upstream(st *State, branch plumbing.ReferenceName, head plumbing.Hash) error {
	cfg, err := r.Repo.Config()
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	up := UpstreamRef(cfg, branch)
	if up == "" {
		return nil
	}
	st.Upstream = up.Short()
	ref, err := r.Repo.Reference(up, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) || head.IsZero() {
		return nil // upstream gone, or nothing committed yet
	}
	if err != nil {
		return fmt.Errorf("resolve upstream %s: %w", up, err)
	}
	st.Ahead, st.Behind, err = AheadBehind(context.Background(), r.Repo, head, ref.Hash())
	return err
}

// UpstreamRef is the ref branch's upstream is tracked in, as Git reads it: branch.<b>.merge
// mapped through the remote's fetch refspecs (or taken as is for remote "."); "" when none.
func UpstreamRef(cfg *config.Config, branch plumbing.ReferenceName) plumbing.ReferenceName {
	b, ok := cfg.Branches[branch.Short()]
	if !ok || b.Remote == "" || b.Merge == "" {
		return ""
	}
	if b.Remote == "." {
		return b.Merge
	}
	if rc, ok := cfg.Remotes[b.Remote]; ok {
		for _, rs := range rc.Fetch {
			if rs.Match(b.Merge) {
				return rs.Dst(b.Merge)
			}
		}
	}
	return ""
}

// status counts paths by their state, with go-git's worktree status (which
// hashes a file only when its size or mtime differ from the index).
func (r *Repo) status(st *State) error {
	wt, err := r.Repo.Worktree()
	if err != nil {
		return err
	}
	excl, err := r.excludes()
	if err != nil {
		return err
	}
	wt.Excludes = append(wt.Excludes, excl...)
	s, err := wt.Status()
	if err != nil {
		return fmt.Errorf("worktree status: %w", err)
	}
	for _, fst := range s {
		switch {
		case fst.Worktree == git.Untracked:
			st.Untracked++
			continue
		case fst.Staging != git.Unmodified:
			st.Staged++
		}
		if fst.Worktree != git.Unmodified {
			st.Unstaged++
		}
	}
	st.Dirty = st.Staged+st.Unstaged+st.Untracked > 0
	return nil
}

// excludes reads info/exclude, which go-git's status leaves to the caller.
func (r *Repo) excludes() ([]gitignore.Pattern, error) {
	f, err := r.GitDir.Open("info/exclude")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseExcludes(f)
}

// ParseExcludes reads exclude patterns in gitignore syntax (info/exclude), at most 1 MiB.
func ParseExcludes(r io.Reader) ([]gitignore.Pattern, error) {
	var ps []gitignore.Pattern
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, nil))
	}
	return ps, sc.Err()
}
