package sqlstore

import (
	"context"
	"database/sql"
)

func init() {
	// One epoch counter for the whole store. An epoch was a number per workspace, so a
	// parent's first lease and its child's first lease were both epoch 1, and the parent's
	// holder passing its epoch to the child was admitted as the child's writer. Drawn from
	// one counter, an epoch names one writer of one workspace: a lease's epoch never admits a
	// write to another workspace (a parent's to a child, a child's to its parent or sibling).
	// Per workspace it still only grows, which is all the fence needs.
	addMigration(26, "store-wide epochs",
		`CREATE TABLE epoch_counter (id INTEGER PRIMARY KEY, n {int64} NOT NULL)`,
		`INSERT INTO epoch_counter (id, n) SELECT 1, COALESCE(MAX(epoch), 0) FROM workspaces`,
	)
}

// nextEpoch takes the store's next epoch, above cur (the workspace's), inside tx. The counter
// row stays locked until tx ends, so racing transactions never take the same epoch; every
// caller locks its workspace row first, so the order of locks is one and no two deadlock.
func (s *DB) nextEpoch(ctx context.Context, tx *sql.Tx, cur uint64) (uint64, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE epoch_counter SET n = n + 1 WHERE id = 1`); err != nil {
		return 0, err
	}
	var n uint64
	if err := tx.QueryRowContext(ctx, `SELECT n FROM epoch_counter WHERE id = 1`).Scan(&n); err != nil {
		return 0, err
	}
	if n > cur {
		return n, nil
	}
	// Only a counter behind a workspace's epoch gets here (a database restored by hand): the
	// counter catches up, and the epoch still grows.
	if _, err := tx.ExecContext(ctx, s.d.q(`UPDATE epoch_counter SET n = ? WHERE id = 1`), int64(cur+1)); err != nil {
		return 0, err
	}
	return cur + 1, nil
}
