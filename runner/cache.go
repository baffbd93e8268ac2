package runner

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// The runner's capture cache (sandbox/snapshot/cache.go) lives in Config.StateDir: written after
// a capture was sent whole or a restore published, read by the next incremental capture.

// cacheRecord is a cache being written during a capture; nil when the runner keeps none.
type cacheRecord struct{ w *snapshot.CacheWriter }

// cacheTrees remembers the tree digest of the snapshot the cache belongs to, for this runner
// process's life: a capture whose parent has the same tree may use it (ParentTree).
type cacheTrees struct {
	mu   sync.Mutex
	snap string
	tree string
}

func (t *cacheTrees) set(snap, tree string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.snap, t.tree = snap, tree
}

// matches reports whether the cache of snapshot snap is known to hold tree.
func (t *cacheTrees) matches(snap, tree string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tree != "" && t.snap == snap && t.tree == tree
}

func (r *Runner) newCache(wsID, snapID string, start time.Time) *cacheRecord {
	if r.cfg.StateDir == "" {
		return nil
	}
	w, err := snapshot.NewCacheWriter(r.cfg.StateDir, wsID, snapID, start)
	if err != nil {
		r.cfg.Logger.Warn("no capture cache", "err", err)
		return nil
	}
	return &cacheRecord{w: w}
}

func (c *cacheRecord) writer() *snapshot.CacheWriter {
	if c == nil {
		return nil
	}
	return c.w
}

func (c *cacheRecord) abort() {
	if c != nil {
		c.w.Abort()
	}
}

// commit publishes the cache of snapshot snap, whose tree digest is tree.
func (c *cacheRecord) commit(log *slog.Logger, trees *cacheTrees, snap, tree string) {
	if c == nil {
		return
	}
	trees.set("", "")
	if err := c.w.Commit(); err != nil {
		log.Warn("capture cache not written", "err", err)
		return
	}
	trees.set(snap, tree)
}

// refsFor opens the cache when the capture asked for refs and the cache belongs to its parent.
func (r *Runner) refsFor(args protocol.SnapshotCaptureArgs) *snapshot.Cache {
	if !args.Incremental || args.Parent == "" || r.cfg.StateDir == "" {
		return nil
	}
	c, err := snapshot.OpenCache(r.cfg.StateDir)
	if err != nil {
		r.cfg.Logger.Warn("capture cache unreadable: capturing in full", "err", err)
		return nil
	}
	if c == nil {
		return nil
	}
	sameTree := r.cacheTrees.matches(c.SnapshotID, args.ParentTree)
	if (c.SnapshotID != args.Parent && !sameTree) || c.WorkspaceID != args.WorkspaceID {
		c.Close()
		return nil
	}
	return c
}

// recordRestore writes the cache of a tree just restored from snapshot snapID.
func (r *Runner) recordRestore(root *fsguard.Root, snapID string, m *snapshot.Manifest, published time.Time) {
	rec := r.newCache(m.WorkspaceID, snapID, published)
	if rec == nil {
		return
	}
	if err := snapshot.RecordRestored(root, ".", m, rec.w); err != nil {
		rec.abort()
		r.cfg.Logger.Warn("capture cache not written after restore", "err", err)
		return
	}
	tree, err := snapshot.TreeDigest(m.Entries)
	if err != nil {
		tree = ""
	}
	rec.commit(r.cfg.Logger, &r.cacheTrees, snapID, tree)
}
