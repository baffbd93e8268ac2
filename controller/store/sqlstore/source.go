package sqlstore

import (
	"context"

	"github.com/tetherhq/tether/protocol"
)

func init() {
	// source_dir is the host directory a --source workspace was made from (the operator's
	// path, as the CLI gave it); source_base the receipt of what the workspace received, the
	// base of a three-way workspace pull.
	addMigration(21, "workspace sources",
		`ALTER TABLE workspaces ADD COLUMN source_dir TEXT`,
		`ALTER TABLE workspaces ADD COLUMN source_base TEXT`,
	)
}

// SetWorkspaceSource records a workspace's source directory and base receipt, once.
func (s *DB) SetWorkspaceSource(ctx context.Context, id, dir, baseSnapshot string) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET source_dir = ?, source_base = ? WHERE id = ? AND source_base IS NULL`),
		dir, baseSnapshot, id)
	if err := affected(res, err, "workspace", id); err != nil {
		if protocol.CodeOf(err) != protocol.CodeNotFound {
			return err
		}
		if _, gerr := s.GetWorkspace(ctx, id); gerr == nil {
			return protocol.Errorf(protocol.CodeConflict, "workspace %s already has a source base", id)
		}
		return err
	}
	return nil
}

// AdvanceSourceBase moves a workspace's base receipt, compare-and-set.
func (s *DB) AdvanceSourceBase(ctx context.Context, id, from, to string) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET source_base = ? WHERE id = ? AND source_base = ?`), to, id, from)
	if err := affected(res, err, "workspace", id); err != nil {
		if protocol.CodeOf(err) != protocol.CodeNotFound {
			return err
		}
		if _, gerr := s.GetWorkspace(ctx, id); gerr == nil {
			return protocol.Errorf(protocol.CodeConflict, "workspace %s's base is no longer %s (another pull moved it)", id, from)
		}
		return err
	}
	return nil
}
