package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func init() {
	// checkpoint_every is the workspace's own interval in nanoseconds: NULL follows the
	// controller's default, 0 is off. checkpoint_at is when a checkpoint last looked at the
	// workspace (with or without a receipt).
	addMigration(16, "checkpoints",
		`ALTER TABLE workspaces ADD COLUMN checkpoint_every {int64}`,
		`ALTER TABLE workspaces ADD COLUMN checkpoint_at {ts}`,
		`ALTER TABLE snapshots ADD COLUMN checkpoint {bool} NOT NULL DEFAULT {false}`,
	)
}

// SetCheckpointEvery sets the workspace's own checkpoint interval (nil: the controller's
// default; 0: off).
func (s *DB) SetCheckpointEvery(ctx context.Context, id string, every *time.Duration) error {
	var v any
	if every != nil {
		v = int64(*every)
	}
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET checkpoint_every = ? WHERE id = ?`), v, id)
	return affected(res, err, "workspace", id)
}

// SetCheckpointChecked records when a checkpoint last looked at the workspace. It is not a change
// of the workspace: updated_at stays.
func (s *DB) SetCheckpointChecked(ctx context.Context, id string, at time.Time) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET checkpoint_at = ? WHERE id = ?`), at.UTC(), id)
	return affected(res, err, "workspace", id)
}

// SetWorkspaceGit replaces a workspace's Git record (a fork's own branch), refusing a branch that
// already has a live workspace in the project (CodeConflict).
func (s *DB) SetWorkspaceGit(ctx context.Context, id string, g *api.WorkspaceGit) error {
	projectID, git, branch, err := workspaceGit(g)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if projectID != "" {
		var n int
		if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM workspaces WHERE project_id = ? AND branch = ? AND id <> ?
			AND state <> 'deleted' AND state <> 'failed'`), projectID, branch, id).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return branchTaken(branch)
		}
	}
	res, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET project_id = ?, git = ?, branch = ? WHERE id = ?`), projectID, git, branch, id)
	if err != nil {
		if s.d.uniqueConstraint(err) == liveBranchIndex {
			return branchTaken(branch)
		}
		return fmt.Errorf("set workspace git: %w", err)
	}
	if err := affected(res, nil, "workspace", id); err != nil {
		return err
	}
	return tx.Commit()
}
