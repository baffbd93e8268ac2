package runner

import (
	"log/slog"
	"time"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// The runner's capture cache (sandbox/snapshot/cache.go) lives in Config.StateDir: written after
// a capture was sent whole or a restore published, read by the next incremental capture.

// cacheRecord is a cache being written during a capture; nil when the runner keeps none.
type cacheRecord struct{ w *snapshot.CacheWriter }

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

func (c *cacheRecord) commit(log *slog.Logger) {
	if c == nil {
		return
	}
	if err := c.w.Commit(); err != nil {
		log.Warn("capture cache not written", "err", err)
	}
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
	if c.SnapshotID != args.Parent || c.WorkspaceID != args.WorkspaceID {
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
	rec.commit(r.cfg.Logger)
}
