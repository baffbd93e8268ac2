package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func init() {
	addMigration(9, "rotating runner session tokens",
		`ALTER TABLE allocations ADD COLUMN pending_session_hash TEXT NOT NULL DEFAULT ''`,
		`CREATE INDEX allocations_pending_session ON allocations(pending_session_hash)`,
	)
}

// RotateSession is the one place a runner's token is spent. An allocation holds at most two
// tokens that admit its runner: the confirmed one (session_hash) and the one the last welcome
// carried (pending_session_hash) — the bootstrap token stands in for the confirmed one until a
// session was ever confirmed. Presenting the pending token proves the runner received it, so it
// becomes the confirmed one and the token before it dies; presenting the confirmed one means the
// last welcome never arrived, so its token is dropped. Either way a new pending token is issued.
func (s *DB) RotateSession(ctx context.Context, allocationID, presented, newHash string) (store.Allocation, error) {
	if presented == "" || newHash == "" {
		return store.Allocation{}, protocol.Errorf(protocol.CodeUnauthorized, "empty runner token")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Allocation{}, err
	}
	defer tx.Rollback()
	a, err := scanAllocation(tx.QueryRowContext(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE id = ?`+s.d.forUpdate), allocationID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "unknown runner token")
	}
	if err != nil {
		return a, err
	}
	if revokedAlloc(a.State) {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	confirmed := a.SessionHash
	switch {
	case presented == a.PendingSessionHash:
		confirmed = presented
	case presented == a.SessionHash:
	case presented == a.BootstrapHash && a.SessionHash == "":
	default:
		return a, protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used or replaced")
	}
	// Compare-and-set on what was read: of two rotations presenting one token, the later one
	// finds the row changed and is refused, whatever the isolation level.
	res, err := tx.ExecContext(ctx, s.d.q(`UPDATE allocations SET bootstrap_used = TRUE, session_hash = ?, pending_session_hash = ?, updated_at = ?
		WHERE id = ? AND session_hash = ? AND pending_session_hash = ?`),
		confirmed, newHash, s.now(), a.ID, a.SessionHash, a.PendingSessionHash)
	if err != nil {
		return a, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used or replaced")
	}
	a.BootstrapUsed, a.SessionHash, a.PendingSessionHash = true, confirmed, newHash
	return a, tx.Commit()
}

func (s *DB) ConfirmSession(ctx context.Context, allocationID, h string) (bool, error) {
	if h == "" {
		return false, nil
	}
	res, err := s.exec(ctx, s.d.q(`UPDATE allocations SET session_hash = pending_session_hash, pending_session_hash = '', updated_at = ?
		WHERE id = ? AND pending_session_hash = ? AND state NOT IN ('destroyed', 'failed')`), s.now(), allocationID, h)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (s *DB) BootstrapAllocation(ctx context.Context, h string) (store.Allocation, error) {
	a, err := scanAllocation(s.queryRow(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE bootstrap_hash = ?`), h))
	if errors.Is(err, sql.ErrNoRows) {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "unknown runner token")
	}
	if err != nil {
		return a, err
	}
	// Used but never confirmed: the welcome that carried its session token may have been lost,
	// so the bootstrap token still admits its runner (RotateSession decides).
	if a.SessionHash != "" {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used")
	}
	if revokedAlloc(a.State) {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	return a, nil
}

func (s *DB) AllocationBySession(ctx context.Context, h string) (store.Allocation, error) {
	if h == "" {
		return store.Allocation{}, protocol.Errorf(protocol.CodeUnauthorized, "empty session token")
	}
	a, err := scanAllocation(s.queryRow(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE session_hash = ? OR pending_session_hash = ?`), h, h))
	if errors.Is(err, sql.ErrNoRows) {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "unknown runner token")
	}
	if err != nil {
		return a, err
	}
	if revokedAlloc(a.State) {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	return a, nil
}

// revokedAlloc says whether an allocation in state admits no runner: destroyed and failed for
// good, stopped until a start gives it a new bootstrap token.
func revokedAlloc(state string) bool {
	return state == store.AllocDestroyed || state == store.AllocFailed || state == store.AllocStopped
}
