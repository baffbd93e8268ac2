package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

func init() {
	addMigration(3, "writer leases and epochs",
		`ALTER TABLE workspaces ADD COLUMN epoch {int64} NOT NULL DEFAULT 0`,
		`ALTER TABLE runs ADD COLUMN epoch {int64} NOT NULL DEFAULT 0`,
		`CREATE TABLE leases (
			workspace_id TEXT PRIMARY KEY REFERENCES workspaces(id), holder TEXT NOT NULL,
			epoch {int64} NOT NULL, acquired_at {ts} NOT NULL, expires_at {ts} NOT NULL)`,
	)
}

func scanLease(row interface{ Scan(...any) error }) (api.Lease, error) {
	var l api.Lease
	err := row.Scan(&l.WorkspaceID, &l.Holder, &l.Epoch, &l.AcquiredAt, &l.ExpiresAt)
	l.AcquiredAt, l.ExpiresAt = l.AcquiredAt.UTC(), l.ExpiresAt.UTC()
	return l, err
}

// AcquireLease grants the workspace's lease to holder with a new, higher epoch (the store's
// next: see nextEpoch), unless a lease
// that has not expired is held. The workspace row is locked for the whole transaction, so of
// any number of racing acquirers exactly one wins an epoch.
func (s *DB) AcquireLease(ctx context.Context, workspaceID, holder string, ttl time.Duration) (api.Lease, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return api.Lease{}, err
	}
	defer tx.Rollback()
	var epoch uint64
	var state api.WorkspaceState
	err = tx.QueryRowContext(ctx, s.d.q(`SELECT epoch, state FROM workspaces WHERE id = ?`+s.d.forUpdate), workspaceID).Scan(&epoch, &state)
	if errors.Is(err, sql.ErrNoRows) || state == api.StateDeleted {
		return api.Lease{}, notFound("workspace", workspaceID)
	}
	if err != nil {
		return api.Lease{}, err
	}
	now := s.now()
	cur, err := scanLease(tx.QueryRowContext(ctx, s.d.q(`SELECT workspace_id, holder, epoch, acquired_at, expires_at FROM leases WHERE workspace_id = ?`), workspaceID))
	switch {
	case err == nil && cur.ExpiresAt.After(now):
		return api.Lease{}, protocol.Errorf(protocol.CodeLeaseHeld, "workspace %s is leased to %q (epoch %d) until %s",
			workspaceID, cur.Holder, cur.Epoch, cur.ExpiresAt.Format(time.RFC3339))
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return api.Lease{}, err
	}
	next, err := s.nextEpoch(ctx, tx, epoch)
	if err != nil {
		return api.Lease{}, err
	}
	l := api.Lease{WorkspaceID: workspaceID, Holder: holder, Epoch: next, AcquiredAt: now, ExpiresAt: now.Add(ttl)}
	if _, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET epoch = ?, updated_at = ? WHERE id = ?`), int64(l.Epoch), now, workspaceID); err != nil {
		return api.Lease{}, err
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`DELETE FROM leases WHERE workspace_id = ?`), workspaceID); err != nil {
		return api.Lease{}, err
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO leases (workspace_id, holder, epoch, acquired_at, expires_at) VALUES (?, ?, ?, ?, ?)`),
		workspaceID, holder, int64(l.Epoch), now, l.ExpiresAt); err != nil {
		return api.Lease{}, fmt.Errorf("insert lease: %w", err)
	}
	return l, tx.Commit()
}

// RenewLease extends the live lease with this epoch; any other epoch is stale.
func (s *DB) RenewLease(ctx context.Context, workspaceID string, epoch uint64, ttl time.Duration) (api.Lease, error) {
	now := s.now()
	res, err := s.exec(ctx, s.d.q(`UPDATE leases SET expires_at = ? WHERE workspace_id = ? AND epoch = ? AND expires_at > ?`),
		now.Add(ttl), workspaceID, int64(epoch), now)
	if err != nil {
		return api.Lease{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return api.Lease{}, protocol.Errorf(protocol.CodeStaleEpoch, "epoch %d holds no live lease on workspace %s", epoch, workspaceID)
	}
	l, _, err := s.CurrentLease(ctx, workspaceID)
	return l, err
}

// ReleaseLease gives up the lease with this epoch. The epoch stays where it is: a later
// acquirer gets a higher one.
func (s *DB) ReleaseLease(ctx context.Context, workspaceID string, epoch uint64) error {
	res, err := s.exec(ctx, s.d.q(`DELETE FROM leases WHERE workspace_id = ? AND epoch = ? AND expires_at > ?`), workspaceID, int64(epoch), s.now())
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return protocol.Errorf(protocol.CodeStaleEpoch, "epoch %d holds no live lease on workspace %s", epoch, workspaceID)
	}
	return nil
}

// CurrentLease returns the live (unexpired) lease, if any.
func (s *DB) CurrentLease(ctx context.Context, workspaceID string) (api.Lease, bool, error) {
	l, err := scanLease(s.queryRow(ctx, s.d.q(`SELECT workspace_id, holder, epoch, acquired_at, expires_at FROM leases WHERE workspace_id = ? AND expires_at > ?`),
		workspaceID, s.now()))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Lease{}, false, nil
	}
	return l, err == nil, err
}

// BumpEpoch raises the workspace's epoch without a lease (a reopen on a new allocation), which
// fences every writer of the old one.
func (s *DB) BumpEpoch(ctx context.Context, workspaceID string) (uint64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var epoch uint64
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT epoch FROM workspaces WHERE id = ?`+s.d.forUpdate), workspaceID).Scan(&epoch); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, notFound("workspace", workspaceID)
		}
		return 0, err
	}
	epoch, err = s.nextEpoch(ctx, tx, epoch)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET epoch = ?, updated_at = ? WHERE id = ?`), int64(epoch), s.now(), workspaceID); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`DELETE FROM leases WHERE workspace_id = ?`), workspaceID); err != nil {
		return 0, err
	}
	return epoch, tx.Commit()
}
