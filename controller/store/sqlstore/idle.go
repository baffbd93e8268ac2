package sqlstore

import (
	"context"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func init() {
	// idle_action is the workspace's own idle policy (stop, close, off; NULL follows the
	// controller's default) and idle_after its duration in nanoseconds. active_at is the last
	// activity controllers flushed for it (runs, service connections, file operations).
	addMigration(23, "idle policy and activity",
		`ALTER TABLE workspaces ADD COLUMN idle_action TEXT`,
		`ALTER TABLE workspaces ADD COLUMN idle_after {int64}`,
		`ALTER TABLE workspaces ADD COLUMN active_at {ts}`,
	)
}

// idleColumns are the values of idle_action and idle_after for p (nil: both NULL).
func idleColumns(p *api.IdlePolicy) (action, after any) {
	if p == nil {
		return nil, nil
	}
	return p.Action, int64(p.After)
}

// SetIdlePolicy sets the workspace's own idle policy (nil: the controller's default). It is a
// setting, not a change of the workspace: updated_at stays.
func (s *DB) SetIdlePolicy(ctx context.Context, id string, p *api.IdlePolicy) error {
	action, after := idleColumns(p)
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET idle_action = ?, idle_after = ? WHERE id = ?`), action, after, id)
	return affected(res, err, "workspace", id)
}

// TouchWorkspaces moves each workspace's last activity forward to its time, never back (several
// controllers flush what each saw, in any order). Unknown ids are skipped; updated_at stays.
func (s *DB) TouchWorkspaces(ctx context.Context, at map[string]time.Time) error {
	q := s.d.q(`UPDATE workspaces SET active_at = ? WHERE id = ? AND (active_at IS NULL OR active_at < ?)`)
	for id, t := range at {
		t = t.UTC()
		if _, err := s.exec(ctx, q, t, id, t); err != nil {
			return err
		}
	}
	return nil
}
