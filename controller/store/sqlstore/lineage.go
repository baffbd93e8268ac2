package sqlstore

import (
	"context"

	"github.com/tetherhq/tether/protocol"
)

func init() {
	// A child workspace's parent and the parent's receipt it continues (workspace create
	// --from, fork). Version 25, not the next free one: other work in flight reserves 22-24.
	addMigration(25, "workspace lineage",
		`ALTER TABLE workspaces ADD COLUMN parent_workspace TEXT`,
		`ALTER TABLE workspaces ADD COLUMN parent_snapshot TEXT`,
	)
}

// SetWorkspaceParent records a child's parent and the receipt it came from, once.
func (s *DB) SetWorkspaceParent(ctx context.Context, id, parent, snapshot string) error {
	if parent == "" || snapshot == "" {
		return protocol.Errorf(protocol.CodeInvalidArgument, "workspace %s: a parent needs a workspace and a receipt", id)
	}
	res, err := s.exec(ctx, s.d.q(`UPDATE workspaces SET parent_workspace = ?, parent_snapshot = ? WHERE id = ? AND parent_workspace IS NULL`),
		parent, snapshot, id)
	if err := affected(res, err, "workspace", id); err != nil {
		if protocol.CodeOf(err) != protocol.CodeNotFound {
			return err
		}
		if _, gerr := s.GetWorkspace(ctx, id); gerr == nil {
			return protocol.Errorf(protocol.CodeConflict, "workspace %s already has a parent", id)
		}
		return err
	}
	return nil
}
