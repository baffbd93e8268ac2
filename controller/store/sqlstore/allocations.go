package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Version 12: which controller holds an allocation's runner connection (owner, since
// owner_since; ” while none does), which one provisioned its sandbox (placed_on), and when its
// runner must have connected by (ready_by; NULL for no deadline), so that controllers sharing
// the store can tell whose allocations are whose and any of them can fail an overdue one.
func init() {
	addMigration(12, "allocation owners and placement",
		`ALTER TABLE allocations ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE allocations ADD COLUMN owner_since {ts} NULL`,
		`ALTER TABLE allocations ADD COLUMN placed_on TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE allocations ADD COLUMN ready_by {ts} NULL`,
		`CREATE INDEX allocations_owner ON allocations(owner) WHERE owner <> ''`,
		`CREATE INDEX allocations_ready_by ON allocations(ready_by) WHERE state = 'starting'`,
	)
}

const allocationCols = `id, workspace_id, provider, state, root, bootstrap_hash, bootstrap_used, session_hash, pending_session_hash,
	runner_version, owner, owner_since, placed_on, ready_by, stopped_tree, created_at, updated_at`

func scanAllocation(row interface{ Scan(...any) error }) (store.Allocation, error) {
	var a store.Allocation
	var ownerSince, readyBy sql.NullTime
	err := row.Scan(&a.ID, &a.WorkspaceID, &a.Provider, &a.State, &a.Root, &a.BootstrapHash, &a.BootstrapUsed,
		&a.SessionHash, &a.PendingSessionHash, &a.RunnerVersion, &a.Owner, &ownerSince, &a.PlacedOn, &readyBy,
		&a.StoppedTree, &a.CreatedAt, &a.UpdatedAt)
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	a.OwnerSince, a.ReadyBy = zeroTime(ownerSince), zeroTime(readyBy)
	return a, err
}

// insertAllocation is the INSERT AddAllocation and CreateWorkspace share. An allocation starts
// with no owner: only ClaimAllocation gives it one.
func (s *DB) insertAllocation(ctx context.Context, tx *sql.Tx, a store.Allocation) error {
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO allocations (id, workspace_id, provider, state, root, bootstrap_hash,
		placed_on, ready_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		a.ID, a.WorkspaceID, a.Provider, a.State, a.Root, a.BootstrapHash, a.PlacedOn, zeroNull(a.ReadyBy),
		a.CreatedAt.UTC(), a.UpdatedAt.UTC()); err != nil {
		return fmt.Errorf("insert allocation: %w", err)
	}
	return nil
}

func (s *DB) GetAllocation(ctx context.Context, id string) (store.Allocation, error) {
	a, err := scanAllocation(s.queryRow(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, notFound("allocation", id)
	}
	return a, err
}

// finalGuard is the condition that keeps an allocation in a final state (destroyed; failed,
// except to destroyed); its two parameters are the state it would move to.
const finalGuard = `(state NOT IN ('destroyed', 'failed') OR state = CAST(? AS TEXT) OR (state = 'failed' AND CAST(? AS TEXT) = 'destroyed'))`

// UpdateAllocation never takes an allocation out of a final state (destroyed; failed, except to
// destroyed): the condition is in the UPDATE itself, so a writer that read "connected" a moment
// before someone destroyed the allocation cannot bring it back to life — and with it the
// session token a destroyed allocation's runner holds. Any state but connected drops the owner:
// no controller holds the connection of a runner that is not connected.
func (s *DB) UpdateAllocation(ctx context.Context, id, state, root, runnerVersion string) error {
	ids, err := s.changeAllocations(ctx, `UPDATE allocations SET state = ?,
		root = CASE WHEN CAST(? AS TEXT) = '' THEN root ELSE ? END,
		runner_version = CASE WHEN CAST(? AS TEXT) = '' THEN runner_version ELSE ? END,
		owner = CASE WHEN CAST(? AS TEXT) = 'connected' THEN owner ELSE '' END,
		owner_since = CASE WHEN CAST(? AS TEXT) = 'connected' THEN owner_since ELSE NULL END,
		updated_at = ?
		WHERE id = ? AND `+finalGuard,
		state, root, root, runnerVersion, runnerVersion, state, state, s.now(), id, state, state)
	if err != nil || len(ids) > 0 {
		return err
	}
	return s.refused(ctx, id, state)
}

// SetStartingRoot changes only the root, and only of a starting allocation. It used to be
// UpdateAllocation to starting, which turned an allocation whose runner had already connected
// (the provider's create returning after the runner's hello, easily so when several are made at
// once) back to starting with no owner: a creator on another controller than the runner's then
// waited for a hello that had come and gone, and failed the workspace at its ready deadline; on
// the same controller the workspace got ready, and the upkeep then failed its allocation as
// overdue and stopped its sandbox.
func (s *DB) SetStartingRoot(ctx context.Context, id, root string) error {
	_, err := s.exec(ctx, s.d.q(`UPDATE allocations SET root = ?, updated_at = ? WHERE id = ? AND state = 'starting'`),
		root, s.now(), id)
	if err != nil {
		return fmt.Errorf("record allocation root: %w", err)
	}
	return nil
}

// refused explains why an allocation's state did not change: it is missing, or final.
func (s *DB) refused(ctx context.Context, id, state string) error {
	a, err := s.GetAllocation(ctx, id)
	if err != nil {
		return err
	}
	return protocol.Errorf(protocol.CodeConflict, "allocation %s is %s, which it stays: it cannot become %s", id, a.State, state)
}

// ClaimAllocation is UpdateAllocation to connected that also names the controller holding the
// connection; a stopped allocation is claimed by no one (its runner was stopped with it). A claim replaces any earlier owner: the runner connects to one controller at a
// time, and the latest connection is the live one.
func (s *DB) ClaimAllocation(ctx context.Context, id, controller, root, runnerVersion string) error {
	if controller == "" {
		return protocol.Errorf(protocol.CodeInvalidArgument, "allocation %s: a claim needs the controller's id", id)
	}
	now := s.now()
	ids, err := s.changeAllocations(ctx, `UPDATE allocations SET state = 'connected',
		root = CASE WHEN CAST(? AS TEXT) = '' THEN root ELSE ? END,
		runner_version = CASE WHEN CAST(? AS TEXT) = '' THEN runner_version ELSE ? END,
		owner = ?, owner_since = ?, updated_at = ?
		WHERE id = ? AND state <> 'stopped' AND `+finalGuard,
		root, root, runnerVersion, runnerVersion, controller, now, now, id, store.AllocConnected, store.AllocConnected)
	if err != nil || len(ids) > 0 {
		return err
	}
	return s.refused(ctx, id, store.AllocConnected)
}

// ReleaseAllocation is guarded by the owner, so a controller that lost a runner's connection
// after another claimed it cannot disconnect the other's. An empty controller owns nothing.
func (s *DB) ReleaseAllocation(ctx context.Context, id, controller string) (bool, error) {
	if controller == "" {
		return false, nil
	}
	ids, err := s.changeAllocations(ctx, `UPDATE allocations SET state = 'disconnected', owner = '', owner_since = NULL, updated_at = ?
		WHERE id = ? AND owner = ? AND state = 'connected'`, s.now(), id, controller)
	return len(ids) > 0, err
}

// DisownAllocations is one UPDATE, so it is atomic whatever the database: a claim that races it
// either comes first (and is disowned) or after (and stands).
func (s *DB) DisownAllocations(ctx context.Context, controller string) ([]string, error) {
	if controller == "" {
		return []string{}, nil
	}
	ids, err := s.changeAllocations(ctx, `UPDATE allocations SET state = 'disconnected', owner = '', owner_since = NULL, updated_at = ?
		WHERE owner = ? AND state = 'connected'`, s.now(), controller)
	slices.Sort(ids)
	return ids, err
}

// OverdueAllocations lists the allocations whose runner missed its deadline, most overdue first.
func (s *DB) OverdueAllocations(ctx context.Context, now time.Time) ([]store.Allocation, error) {
	return queryAll(ctx, s, scanAllocation, `SELECT `+allocationCols+` FROM allocations
		WHERE state = 'starting' AND ready_by IS NOT NULL AND ready_by < ? ORDER BY ready_by, id`, now.UTC())
}

// changeAllocations runs an UPDATE of allocations and announces the ids of the rows it changed
// to WatchAllocations (see dialect.announce), and returns them. It is one statement: on
// PostgreSQL the notifications leave with its commit, so a watcher never re-reads a record
// before the change is visible.
func (s *DB) changeAllocations(ctx context.Context, update string, args ...any) ([]string, error) {
	rows, err := s.query(ctx, s.d.q(s.d.announce(update)), args...)
	if err != nil {
		return nil, fmt.Errorf("update allocations: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("update allocations: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("update allocations: %w", err)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("update allocations: %w", err)
	}
	if !s.d.shared {
		s.watch.send(ids...)
	}
	return ids, nil
}

func (s *DB) AddAllocation(ctx context.Context, a store.Allocation) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.insertAllocation(ctx, tx, a); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET allocation_id = ?, provider = ?, updated_at = ? WHERE id = ?`), a.ID, a.Provider, s.now(), a.WorkspaceID)
	if err := affected(res, err, "workspace", a.WorkspaceID); err != nil {
		return err
	}
	return tx.Commit()
}
