package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func init() {
	addMigration(5, "artifacts",
		`CREATE TABLE IF NOT EXISTS artifacts (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id), name TEXT NOT NULL DEFAULT '',
			bytes {int64} NOT NULL, sha256 TEXT NOT NULL, object_key TEXT NOT NULL,
			revoked_at {ts} NULL, created_at {ts} NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS artifacts_workspace ON artifacts(workspace_id, created_at)`,
	)
}

const artifactCols = `id, workspace_id, name, bytes, sha256, object_key, revoked_at, created_at`

func scanArtifact(row interface{ Scan(...any) error }) (api.Artifact, error) {
	var a api.Artifact
	var revoked sql.NullTime
	if err := row.Scan(&a.ID, &a.WorkspaceID, &a.Name, &a.Bytes, &a.SHA256, &a.ObjectKey, &revoked, &a.CreatedAt); err != nil {
		return a, err
	}
	a.CreatedAt = a.CreatedAt.UTC()
	if revoked.Valid {
		t := revoked.Time.UTC()
		a.RevokedAt = &t
	}
	a.Untrusted = true // always, whatever anyone recorded
	return a, nil
}

func (s *DB) CreateArtifact(ctx context.Context, a api.Artifact) error {
	_, err := s.exec(ctx, s.d.q(`INSERT INTO artifacts (`+artifactCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		a.ID, a.WorkspaceID, a.Name, a.Bytes, a.SHA256, a.ObjectKey, nullTime(a.RevokedAt), a.CreatedAt.UTC())
	if err != nil {
		return fmt.Errorf("insert artifact: %w", err)
	}
	return nil
}

func nullTime(t *time.Time) sql.NullTime {
	if t == nil {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: t.UTC(), Valid: true}
}

func (s *DB) GetArtifact(ctx context.Context, id string) (api.Artifact, error) {
	a, err := scanArtifact(s.queryRow(ctx, s.d.q(`SELECT `+artifactCols+` FROM artifacts WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, notFound("artifact", id)
	}
	return a, err
}

func (s *DB) ListArtifacts(ctx context.Context, workspaceID string) ([]api.Artifact, error) {
	return queryAll(ctx, s, scanArtifact, `SELECT `+artifactCols+` FROM artifacts WHERE workspace_id = ? ORDER BY created_at, id`, workspaceID)
}

// RevokeArtifact sets revoked_at once; a second revocation keeps the first time.
func (s *DB) RevokeArtifact(ctx context.Context, id string, at time.Time) (api.Artifact, error) {
	if _, err := s.exec(ctx, s.d.q(`UPDATE artifacts SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`), at.UTC(), id); err != nil {
		return api.Artifact{}, fmt.Errorf("revoke artifact: %w", err)
	}
	return s.GetArtifact(ctx, id)
}
