package sqlstore

import (
	"context"
	"time"

	"github.com/tetherhq/tether/controller/store"
)

// Version 24 (22 and 23 are left to the branches of issue 22 made beside this one): the tree
// digest of a stopped allocation's workspace as it was when its sandbox stopped (” when it could
// not be read), so reads of a stopped workspace can serve its last receipt exactly when that
// receipt holds the tree the sandbox kept.
func init() {
	addMigration(24, "stopped allocations",
		`ALTER TABLE allocations ADD COLUMN stopped_tree TEXT NOT NULL DEFAULT ''`,
	)
}

// StopAllocation makes every token of the allocation dead in the same statement that marks it
// stopped: the bootstrap hash becomes a value no token hashes to (unique, as the column must
// be), and both session hashes are cleared. A runner that outlived its sandbox's stop can then
// never reconnect, and the next start hands out a fresh bootstrap token (RestartAllocation).
func (s *DB) StopAllocation(ctx context.Context, id, tree string) error {
	ids, err := s.changeAllocations(ctx, `UPDATE allocations SET state = 'stopped', stopped_tree = ?,
		bootstrap_hash = 'stopped ' || id, bootstrap_used = TRUE, session_hash = '', pending_session_hash = '',
		owner = '', owner_since = NULL, ready_by = NULL, updated_at = ?
		WHERE id = ? AND state IN ('starting', 'connected', 'disconnected', 'stopped')`, tree, s.now(), id)
	if err != nil || len(ids) > 0 {
		return err
	}
	return s.refused(ctx, id, store.AllocStopped)
}

// RestartAllocation is the start of a stopped allocation: starting again, admitting only the
// runner presenting the new bootstrap token, by readyBy. The stop's tree digest stays (a start
// that fails before its runner is admitted leaves the tree as the stop left it); it describes
// the sandbox only while the allocation is stopped, and readers look at it only then.
func (s *DB) RestartAllocation(ctx context.Context, id, bootstrapHash string, readyBy time.Time) error {
	ids, err := s.changeAllocations(ctx, `UPDATE allocations SET state = 'starting', bootstrap_hash = ?, bootstrap_used = FALSE,
		session_hash = '', pending_session_hash = '', owner = '', owner_since = NULL, ready_by = ?, updated_at = ?
		WHERE id = ? AND state = 'stopped'`, bootstrapHash, zeroNull(readyBy), s.now(), id)
	if err != nil || len(ids) > 0 {
		return err
	}
	return s.refused(ctx, id, store.AllocStarting)
}
