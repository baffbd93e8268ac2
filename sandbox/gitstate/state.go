// Package gitstate reads a workspace's Git state with go-git (no git
// command in the sandbox): HEAD, branch, upstream, ahead/behind counts and
// how dirty the worktree is. It also opens repositories read-only for the
// snapshot writer, which normalizes linked worktrees and alternates.
package gitstate

import (
	"bufio"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"
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
	b, ok := cfg.Branches[branch.Short()]
	if !ok || b.Remote == "" || b.Merge == "" {
		return nil
	}
	var up plumbing.ReferenceName
	if b.Remote == "." {
		up = b.Merge
	} else if rc, ok := cfg.Remotes[b.Remote]; ok {
		for _, rs := range rc.Fetch {
			if rs.Match(b.Merge) {
				up = rs.Dst(b.Merge)
				break
			}
		}
	}
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
	st.Ahead, st.Behind, err = r.aheadBehind(head, ref.Hash())
	return err
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
	f, err := r.Common.Open("info/exclude")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ps []gitignore.Pattern
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, nil))
	}
	return ps, sc.Err()
}

// aheadBehind counts commits reachable from a but not b, and from b but
// not a, walking both histories newest first and stopping once every
// commit still queued is reachable from both sides (as git does).
func (r *Repo) aheadBehind(a, b plumbing.Hash) (ahead, behind int, err error) {
	if a == b {
		return 0, 0, nil
	}
	const fromA, fromB = 1, 2
	flags := map[plumbing.Hash]uint8{}
	q := &commitQueue{}
	push := func(h plumbing.Hash, f uint8) error {
		old := flags[h]
		if old|f == old {
			return nil
		}
		c, err := object.GetCommit(r.Store, h)
		if err != nil {
			return fmt.Errorf("read commit %s: %w", h, err)
		}
		flags[h] = old | f
		heap.Push(q, c)
		return nil
	}
	if err := push(a, fromA); err != nil {
		return 0, 0, err
	}
	if err := push(b, fromB); err != nil {
		return 0, 0, err
	}
	for q.Len() > 0 && q.anyUnsettled(flags) {
		c := heap.Pop(q).(*object.Commit)
		f := flags[c.Hash]
		for _, p := range c.ParentHashes {
			if err := push(p, f); err != nil {
				if errors.Is(err, plumbing.ErrObjectNotFound) {
					continue // shallow history ends here
				}
				return 0, 0, err
			}
		}
	}
	for _, f := range flags {
		switch f {
		case fromA:
			ahead++
		case fromB:
			behind++
		}
	}
	return ahead, behind, nil
}

// commitQueue is a max-heap of commits by committer time.
type commitQueue []*object.Commit

func (q commitQueue) Len() int { return len(q) }
func (q commitQueue) Less(i, j int) bool {
	return q[i].Committer.When.After(q[j].Committer.When)
}
func (q commitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)   { *q = append(*q, x.(*object.Commit)) }
func (q *commitQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}

func (q commitQueue) anyUnsettled(flags map[plumbing.Hash]uint8) bool {
	for _, c := range q {
		if flags[c.Hash] != 3 {
			return true
		}
	}
	return false
}
