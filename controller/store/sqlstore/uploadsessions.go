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

// Version 20: resumable upload sessions, kept in the store so any controller of a cluster can
// continue one (the bytes are staged by the workspace's runner, which every controller reaches).
func init() {
	addMigration(20, "resumable upload sessions",
		`CREATE TABLE upload_sessions (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, path TEXT NOT NULL, size {int64} NOT NULL,
			sha256 TEXT NOT NULL, mode INTEGER NOT NULL, replace_existing {bool} NOT NULL, created_by TEXT NOT NULL,
			upload_offset {int64} NOT NULL DEFAULT 0, received {int64} NOT NULL DEFAULT 0,
			created_at {ts} NOT NULL, expires_at {ts} NOT NULL, completed_at {ts} NULL)`,
		`CREATE INDEX upload_sessions_path ON upload_sessions(workspace_id, path)`,
		`CREATE INDEX upload_sessions_expiry ON upload_sessions(expires_at)`,
	)
}

const uploadCols = `id, workspace_id, path, size, sha256, mode, replace_existing, created_by, upload_offset, received, created_at, expires_at, completed_at`

func scanUpload(row interface{ Scan(...any) error }) (store.UploadSession, error) {
	var u store.UploadSession
	var mode int64
	var completed sql.NullTime
	if err := row.Scan(&u.ID, &u.WorkspaceID, &u.Path, &u.Size, &u.SHA256, &mode, &u.Replace, &u.CreatedBy, &u.Offset, &u.Received,
		&u.CreatedAt, &u.ExpiresAt, &completed); err != nil {
		return u, err
	}
	u.Mode = uint32(mode)
	u.CreatedAt, u.ExpiresAt, u.CompletedAt = u.CreatedAt.UTC(), u.ExpiresAt.UTC(), zeroTime(completed)
	return u, nil
}

func (s *DB) CreateUploadSession(ctx context.Context, u store.UploadSession) error {
	_, err := s.exec(ctx, s.d.q(`INSERT INTO upload_sessions (`+uploadCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		u.ID, u.WorkspaceID, u.Path, u.Size, u.SHA256, int64(u.Mode), u.Replace, u.CreatedBy, u.Offset, u.Received,
		u.CreatedAt.UTC(), u.ExpiresAt.UTC(), zeroNull(u.CompletedAt))
	if err != nil {
		// A taken id (random, 160 bits) is a broken RNG, not a caller's error.
		return fmt.Errorf("insert upload session %s: %w", u.ID, err)
	}
	return nil
}

func (s *DB) GetUploadSession(ctx context.Context, id string) (store.UploadSession, error) {
	u, err := scanUpload(s.queryRow(ctx, s.d.q(`SELECT `+uploadCols+` FROM upload_sessions WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return u, protocol.Errorf(protocol.CodeNotFound, "upload %q not found", id)
	}
	return u, err
}

func (s *DB) ListUploadSessions(ctx context.Context, workspaceID, path string) ([]store.UploadSession, error) {
	if path == "" {
		return queryAll(ctx, s, scanUpload, `SELECT `+uploadCols+` FROM upload_sessions WHERE workspace_id = ? ORDER BY created_at, id`, workspaceID)
	}
	return queryAll(ctx, s, scanUpload, `SELECT `+uploadCols+` FROM upload_sessions WHERE workspace_id = ? AND path = ? ORDER BY created_at, id`,
		workspaceID, path)
}

func (s *DB) RecordUploadProgress(ctx context.Context, id string, offset, received int64, completed time.Time) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE upload_sessions SET upload_offset = ?, received = received + ?,
		completed_at = COALESCE(completed_at, ?) WHERE id = ?`), offset, received, zeroNull(completed), id)
	n, err := rowsAffected(res, err)
	if err != nil {
		return err
	}
	if n == 0 {
		return protocol.Errorf(protocol.CodeNotFound, "upload %q not found", id)
	}
	return nil
}

func (s *DB) DeleteUploadSession(ctx context.Context, id string) error {
	n, err := rowsAffected(s.exec(ctx, s.d.q(`DELETE FROM upload_sessions WHERE id = ?`), id))
	if err != nil {
		return err
	}
	if n == 0 {
		return protocol.Errorf(protocol.CodeNotFound, "upload %q not found", id)
	}
	return nil
}

func (s *DB) ExpiredUploadSessions(ctx context.Context, before time.Time, limit int) ([]store.UploadSession, error) {
	return queryAll(ctx, s, scanUpload, `SELECT `+uploadCols+` FROM upload_sessions WHERE expires_at < ? ORDER BY expires_at, id LIMIT ?`,
		before.UTC(), limit)
}
