package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Version 18: preview tokens, kept in the store so every controller of a cluster serves any
// preview link. Only the secret's hash is kept; a revoked or expired row stays until purged.
func init() {
	addMigration(18, "preview tokens",
		`CREATE TABLE previews (
			id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, workspace_id TEXT NOT NULL, service TEXT NOT NULL,
			created_at {ts} NOT NULL, expires_at {ts} NOT NULL, revoked_at {ts} NULL)`,
		`CREATE INDEX previews_service ON previews(workspace_id, service)`,
	)
}

const previewCols = `id, hash, workspace_id, service, created_at, expires_at, revoked_at`

func scanPreview(row interface{ Scan(...any) error }) (store.Preview, error) {
	var p store.Preview
	var revoked sql.NullTime
	if err := row.Scan(&p.ID, &p.Hash, &p.WorkspaceID, &p.Service, &p.CreatedAt, &p.ExpiresAt, &revoked); err != nil {
		return p, err
	}
	p.CreatedAt, p.ExpiresAt, p.RevokedAt = p.CreatedAt.UTC(), p.ExpiresAt.UTC(), zeroTime(revoked)
	return p, nil
}

func (s *DB) CreatePreview(ctx context.Context, p store.Preview) error {
	_, err := s.exec(ctx, s.d.q(`INSERT INTO previews (`+previewCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		p.ID, p.Hash, p.WorkspaceID, p.Service, p.CreatedAt.UTC(), p.ExpiresAt.UTC(), zeroNull(p.RevokedAt))
	if err != nil {
		// A taken id or hash (random, 128 and 160 bits) is a broken RNG, not a caller's error.
		return fmt.Errorf("insert preview %s: %w", p.ID, err)
	}
	return nil
}

// PreviewByHash finds the preview whose secret hashes to hash, whatever its state.
func (s *DB) PreviewByHash(ctx context.Context, hash string) (store.Preview, error) {
	p, err := scanPreview(s.queryRow(ctx, s.d.q(`SELECT `+previewCols+` FROM previews WHERE hash = ?`), hash))
	if errors.Is(err, sql.ErrNoRows) {
		// Never echo the hash: it is as good as the secret's fingerprint in a log.
		return p, protocol.Errorf(protocol.CodeNotFound, "no preview has that hash")
	}
	return p, err
}

func (s *DB) ListPreviews(ctx context.Context, workspaceID, service string) ([]store.Preview, error) {
	return queryAll(ctx, s, scanPreview, `SELECT `+previewCols+` FROM previews WHERE workspace_id = ? AND service = ? ORDER BY created_at, id`,
		workspaceID, service)
}

func (s *DB) RevokePreviews(ctx context.Context, workspaceID, service string, at time.Time) (int, error) {
	res, err := s.exec(ctx, s.d.q(`UPDATE previews SET revoked_at = ? WHERE workspace_id = ? AND service = ? AND revoked_at IS NULL AND expires_at > ?`),
		at.UTC(), workspaceID, service, at.UTC())
	return rowsAffected(res, err)
}

func (s *DB) PurgePreviews(ctx context.Context, before time.Time) (int, error) {
	res, err := s.exec(ctx, s.d.q(`DELETE FROM previews WHERE expires_at < ? OR revoked_at < ?`), before.UTC(), before.UTC())
	return rowsAffected(res, err)
}

func rowsAffected(res sql.Result, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
