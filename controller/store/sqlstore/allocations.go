package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

const allocationCols = `id, workspace_id, provider, state, root, bootstrap_hash, bootstrap_used, session_hash, pending_session_hash, runner_version, created_at, updated_at`

func scanAllocation(row interface{ Scan(...any) error }) (store.Allocation, error) {
	var a store.Allocation
	err := row.Scan(&a.ID, &a.WorkspaceID, &a.Provider, &a.State, &a.Root, &a.BootstrapHash, &a.BootstrapUsed,
		&a.SessionHash, &a.PendingSessionHash, &a.RunnerVersion, &a.CreatedAt, &a.UpdatedAt)
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, err
}

func (s *DB) GetAllocation(ctx context.Context, id string) (store.Allocation, error) {
	a, err := scanAllocation(s.db.QueryRowContext(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, notFound("allocation", id)
	}
	return a, err
}

// UpdateAllocation never takes an allocation out of a final state (destroyed; failed, except to
// destroyed): the condition is in the UPDATE itself, so a writer that read "connected" a moment
// before someone destroyed the allocation cannot bring it back to life — and with it the
// session token a destroyed allocation's runner holds.
func (s *DB) UpdateAllocation(ctx context.Context, id, state, root, runnerVersion string) error {
	res, err := s.db.ExecContext(ctx, s.d.q(`UPDATE allocations SET state = ?, root = CASE WHEN CAST(? AS TEXT) = '' THEN root ELSE ? END,
		runner_version = CASE WHEN CAST(? AS TEXT) = '' THEN runner_version ELSE ? END, updated_at = ?
		WHERE id = ? AND (state NOT IN (?, ?) OR state = ? OR (state = ? AND CAST(? AS TEXT) = ?))`),
		state, root, root, runnerVersion, runnerVersion, s.now(), id,
		store.AllocDestroyed, store.AllocFailed, state, store.AllocFailed, state, store.AllocDestroyed)
	if err := affected(res, err, "allocation", id); protocol.CodeOf(err) != protocol.CodeNotFound {
		return err
	}
	a, err := s.GetAllocation(ctx, id)
	if err != nil {
		return err
	}
	return protocol.Errorf(protocol.CodeConflict, "allocation %s is %s, which it stays: it cannot become %s", id, a.State, state)
}

func (s *DB) AddAllocation(ctx context.Context, a store.Allocation) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO allocations (id, workspace_id, provider, state, root, bootstrap_hash, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), a.ID, a.WorkspaceID, a.Provider, a.State, a.Root, a.BootstrapHash, a.CreatedAt.UTC(), a.UpdatedAt.UTC()); err != nil {
		return fmt.Errorf("insert allocation: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET allocation_id = ?, provider = ?, updated_at = ? WHERE id = ?`), a.ID, a.Provider, s.now(), a.WorkspaceID)
	if err := affected(res, err, "workspace", a.WorkspaceID); err != nil {
		return err
	}
	return tx.Commit()
}
