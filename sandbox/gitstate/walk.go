package gitstate

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/tetherhq/tether/protocol"
)

// Ahead/behind is counted the way Git counts `git rev-list --left-right --count a...b`: the
// commits reachable from a and not from b, and the other way round. Both sides are painted in
// one walk, newest commit first; a commit whose paint grows is queued again, so paint reaches
// every ancestor of a painted commit. The walk stops once every queued commit carries both paints
// (nothing older can then be reachable from only one side) and a few more commits after that,
// as Git's own walk does, to tolerate committer clocks that went backwards. Only the counts rely
// on commit dates; the decision to move a branch (reachable) never does.

const (
	fromA = 1 << iota
	fromB
	both = fromA | fromB
)

// slop is how many commits the walk goes on for once only shared history is queued (Git's
// rev-list uses the same margin against clock skew).
const slop = 5

type walkItem struct {
	h    plumbing.Hash
	when time.Time
	seq  int // FIFO among equal dates, so the walk is deterministic
}

type walkQueue []walkItem

func (q walkQueue) Len() int { return len(q) }
func (q walkQueue) Less(i, j int) bool {
	if !q[i].when.Equal(q[j].when) {
		return q[i].when.After(q[j].when)
	}
	return q[i].seq < q[j].seq
}
func (q walkQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *walkQueue) Push(x any)   { *q = append(*q, x.(walkItem)) }
func (q *walkQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// Commits reads commit objects: a *git.Repository, or anything embedding one.
type Commits interface {
	CommitObject(h plumbing.Hash) (*object.Commit, error)
}

// walker walks commits of one repository, reading each commit once.
type walker struct {
	r       Commits
	commits map[plumbing.Hash]*object.Commit
	q       walkQueue
	seq     int
}

func newWalker(r Commits) *walker {
	return &walker{r: r, commits: map[plumbing.Hash]*object.Commit{}}
}

func (w *walker) commit(h plumbing.Hash) (*object.Commit, error) {
	if c, ok := w.commits[h]; ok {
		return c, nil
	}
	c, err := w.r.CommitObject(h)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, protocol.Errorf(protocol.CodeCorrupt, "commit %s is missing from the repository (a shallow or damaged history)", h)
		}
		return nil, protocol.Errorf(protocol.CodeCorrupt, "read commit %s: %v", h, err)
	}
	w.commits[h] = c
	return c, nil
}

func (w *walker) push(h plumbing.Hash) error {
	c, err := w.commit(h)
	if err != nil {
		return err
	}
	w.enqueue(h, c)
	return nil
}

// pushParent queues a parent; one missing from the repository is where its history ends (a
// shallow clone's boundary), as in Git.
func (w *walker) pushParent(h plumbing.Hash) (bool, error) {
	c, err := w.r.CommitObject(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, protocol.Errorf(protocol.CodeCorrupt, "read commit %s: %v", h, err)
	}
	w.commits[h] = c
	w.enqueue(h, c)
	return true, nil
}

func (w *walker) enqueue(h plumbing.Hash, c *object.Commit) {
	w.seq++
	heap.Push(&w.q, walkItem{h: h, when: c.Committer.When, seq: w.seq})
}

// AheadBehind counts the commits reachable from a and not from b (ahead) and from b and not
// from a (behind). Merges count once, whatever number of parents lead to them.
func AheadBehind(ctx context.Context, r Commits, a, b plumbing.Hash) (ahead, behind int, err error) {
	if a == b {
		return 0, 0, nil
	}
	w := newWalker(r)
	paint := map[plumbing.Hash]uint8{a: fromA}
	paint[b] |= fromB
	done := map[plumbing.Hash]uint8{} // the paint a commit had when its parents last got it
	if err := w.push(a); err != nil {
		return 0, 0, err
	}
	if err := w.push(b); err != nil {
		return 0, 0, err
	}
	extra := slop
	for w.q.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if !w.interesting(paint) {
			if extra == 0 {
				break
			}
			extra--
		}
		it := heap.Pop(&w.q).(walkItem)
		p := paint[it.h]
		if done[it.h] == p {
			continue // queued again for paint it has already passed on
		}
		done[it.h] = p
		c, err := w.commit(it.h)
		if err != nil {
			return 0, 0, err
		}
		delete(w.commits, it.h) // only queued commits are kept; a repainted one is read again
		for _, parent := range c.ParentHashes {
			if paint[parent]&p == p {
				continue
			}
			if ok, err := w.pushParent(parent); err != nil {
				return 0, 0, err
			} else if ok {
				paint[parent] |= p
			}
		}
	}
	for _, p := range paint {
		switch p {
		case fromA:
			ahead++
		case fromB:
			behind++
		}
	}
	return ahead, behind, nil
}

// interesting says whether a queued commit still carries one side's paint only: while one does,
// commits reachable from only one side may remain unvisited.
func (w *walker) interesting(paint map[plumbing.Hash]uint8) bool {
	for _, it := range w.q {
		if paint[it.h] != both {
			return true
		}
	}
	return false
}

// Reachable says whether ancestor is reachable from tip (tip itself included). It walks until it
// finds ancestor or runs out of history, without relying on dates, because moving a branch
// depends on the answer.
func Reachable(ctx context.Context, r Commits, tip, ancestor plumbing.Hash) (bool, error) {
	if tip == ancestor {
		return true, nil
	}
	w := newWalker(r)
	seen := map[plumbing.Hash]bool{tip: true}
	if err := w.push(tip); err != nil {
		return false, err
	}
	for w.q.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		it := heap.Pop(&w.q).(walkItem)
		c, err := w.commit(it.h)
		if err != nil {
			return false, err
		}
		// Commits already walked are no longer needed; only the queue's are.
		delete(w.commits, it.h)
		for _, p := range c.ParentHashes {
			if p == ancestor {
				return true, nil
			}
			if seen[p] {
				continue
			}
			seen[p] = true
			if _, err := w.pushParent(p); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// CheckHistory makes sure every ancestor commit of tips is in the repository: a pack made with
// "have"s the receiver does not have leaves holes Git would later trip on (git log, git fsck),
// with no shallow file to explain them. Trees of older commits are not walked: that would be a
// full fsck.
func CheckHistory(ctx context.Context, r Commits, tips ...plumbing.Hash) error {
	seen := map[plumbing.Hash]bool{}
	var stack []plumbing.Hash
	for _, t := range tips {
		if !t.IsZero() && !seen[t] {
			seen[t] = true
			stack = append(stack, t)
		}
	}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		c, err := r.CommitObject(h)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return protocol.Errorf(protocol.CodeCorrupt, "the pack lacks commit %s of the history: a clone needs every commit reachable from the checkout", h)
		}
		if err != nil {
			return protocol.Errorf(protocol.CodeCorrupt, "read commit %s: %v", h, err)
		}
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	return nil
}
