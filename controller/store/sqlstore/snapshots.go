package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

func init() {
	addMigration(2, "snapshots",
		`CREATE TABLE IF NOT EXISTS snapshots (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id), epoch {int64} NOT NULL,
			parent TEXT NOT NULL DEFAULT '', object_key TEXT NOT NULL UNIQUE, bytes {int64} NOT NULL,
			sha256 TEXT NOT NULL, encrypted {bool} NOT NULL, summary TEXT NOT NULL, created_at {ts} NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS snapshots_workspace ON snapshots(workspace_id, created_at)`,
	)
	addMigration(15, "snapshot layers",
		`ALTER TABLE snapshots ADD COLUMN layers TEXT NOT NULL DEFAULT '[]'`,
		`ALTER TABLE snapshots ADD COLUMN manifest_key TEXT NOT NULL DEFAULT ''`,
	)
}

func (s *DB) CreateSnapshot(ctx context.Context, snap api.Snapshot) error {
	args, err := snapshotArgs(snap)
	if err != nil {
		return err
	}
	if _, err := s.exec(ctx, s.d.q(insertSnapshotSQL), args...); err != nil {
		return fmt.Errorf("insert snapshot receipt: %w", err)
	}
	return nil
}

const insertSnapshotSQL = `INSERT INTO snapshots (` + snapshotCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// snapshotArgs are snap's values for insertSnapshotSQL.
func snapshotArgs(snap api.Snapshot) ([]any, error) {
	summary, err := json.Marshal(snap.Summary)
	if err != nil {
		return nil, err
	}
	layers, err := json.Marshal(nonNil(snap.Layers))
	if err != nil {
		return nil, err
	}
	return []any{snap.ID, snap.WorkspaceID, snap.Epoch, snap.Parent, snap.ObjectKey, snap.Bytes, snap.SHA256, snap.Encrypted,
		string(summary), snap.CreatedAt.UTC(), nullTime(snap.ReclaimedAt), string(layers), snap.ManifestKey, snap.Checkpoint}, nil
}

// AppendSnapshot writes snap only while snap.Parent is still the newest receipt of its workspace
// and the workspace is not deleted. Without it two overlapping captures of one workspace (a
// checkpoint still running when close saved) could leave the older tree sorted as the newest,
// which reopen restores and reclaim keeps while freeing the newer; and a capture overlapping
// `workspace rm --purge` could leave a receipt behind it. Receipts sort by created_at, written by
// whichever controller captured: the new one is placed after its parent whatever their clocks.
func (s *DB) AppendSnapshot(ctx context.Context, snap api.Snapshot) (api.Snapshot, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return snap, err
	}
	defer tx.Rollback()
	var state api.WorkspaceState
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT state FROM workspaces WHERE id = ?`+s.d.forUpdate), snap.WorkspaceID).Scan(&state); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return snap, notFound("workspace", snap.WorkspaceID)
		}
		return snap, fmt.Errorf("lock the workspace of snapshot %s: %w", snap.ID, err)
	}
	if state == api.StateDeleted {
		return snap, protocol.Errorf(protocol.CodeConflict, "workspace %s was deleted during the capture", snap.WorkspaceID)
	}
	var newest string
	var newestAt time.Time
	err = tx.QueryRowContext(ctx, s.d.q(`SELECT id, created_at FROM snapshots WHERE workspace_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`),
		snap.WorkspaceID).Scan(&newest, &newestAt)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return snap, err
	}
	if newest != snap.Parent {
		return snap, protocol.Errorf(protocol.CodeConflict, "receipt %s of workspace %s was written during the capture, which started from %q",
			newest, snap.WorkspaceID, snap.Parent)
	}
	// Compared as stored: PostgreSQL keeps microseconds, and a time rounded onto its parent's
	// would sort by id.
	if newest != "" && !snap.CreatedAt.Truncate(time.Microsecond).After(newestAt) {
		// A millisecond, not a tick: the column may keep microseconds only.
		snap.CreatedAt = newestAt.UTC().Add(time.Millisecond)
	}
	args, err := snapshotArgs(snap)
	if err != nil {
		return snap, err
	}
	if _, err := tx.ExecContext(ctx, s.d.q(insertSnapshotSQL), args...); err != nil {
		return snap, fmt.Errorf("insert snapshot receipt: %w", err)
	}
	return snap, tx.Commit()
}

const snapshotCols = `id, workspace_id, epoch, parent, object_key, bytes, sha256, encrypted, summary, created_at, reclaimed_at, layers, manifest_key, checkpoint`

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func scanSnapshot(row interface{ Scan(...any) error }) (api.Snapshot, error) {
	var snap api.Snapshot
	var summary, layers string
	var reclaimed sql.NullTime
	if err := row.Scan(&snap.ID, &snap.WorkspaceID, &snap.Epoch, &snap.Parent, &snap.ObjectKey, &snap.Bytes,
		&snap.SHA256, &snap.Encrypted, &summary, &snap.CreatedAt, &reclaimed, &layers, &snap.ManifestKey, &snap.Checkpoint); err != nil {
		return snap, err
	}
	if err := json.Unmarshal([]byte(layers), &snap.Layers); err != nil {
		return snap, fmt.Errorf("snapshot %s layers: %w", snap.ID, err)
	}
	if len(snap.Layers) == 0 {
		snap.Layers = nil
	}
	snap.CreatedAt, snap.ReclaimedAt = snap.CreatedAt.UTC(), timePtr(reclaimed)
	if err := json.Unmarshal([]byte(summary), &snap.Summary); err != nil {
		return snap, fmt.Errorf("snapshot %s summary: %w", snap.ID, err)
	}
	snap.Entries, snap.Git = snap.Summary.Entries, snap.Summary.Git
	return snap, nil
}

func (s *DB) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	snap, err := scanSnapshot(s.queryRow(ctx, s.d.q(`SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return snap, notFound("snapshot", id)
	}
	return snap, err
}

func (s *DB) ListSnapshots(ctx context.Context, workspaceID string) ([]api.Snapshot, error) {
	return queryAll(ctx, s, scanSnapshot, `SELECT `+snapshotCols+` FROM snapshots WHERE workspace_id = ? ORDER BY created_at, id`, workspaceID)
}

// SnapshotObjectKeys lists every object a receipt not reclaimed needs: its own, its manifest's
// and its layers'. A key is listed while any receipt naming it is live, whatever other receipts
// of it were reclaimed.
func (s *DB) SnapshotObjectKeys(ctx context.Context) (map[string]bool, error) {
	keys := map[string]bool{}
	err := s.eachLiveObject(ctx, func(key, _ string) { keys[key] = true })
	return keys, err
}

// SnapshotObjectUsers maps every object a receipt not reclaimed needs to the workspaces whose
// receipts need it, each once, in no order.
func (s *DB) SnapshotObjectUsers(ctx context.Context) (map[string][]string, error) {
	users := map[string][]string{}
	err := s.eachLiveObject(ctx, func(key, ws string) {
		if !slices.Contains(users[key], ws) {
			users[key] = append(users[key], ws)
		}
	})
	return users, err
}

// eachLiveObject calls fn with every object key a receipt not reclaimed names (its own, its
// manifest's, its layers') and the receipt's workspace; a key may come several times.
func (s *DB) eachLiveObject(ctx context.Context, fn func(key, workspaceID string)) error {
	rows, err := s.db.QueryContext(ctx, `SELECT object_key, manifest_key, layers, workspace_id FROM snapshots WHERE reclaimed_at IS NULL`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, manifest, layers, ws string
		if err := rows.Scan(&k, &manifest, &layers, &ws); err != nil {
			return err
		}
		fn(k, ws)
		if manifest != "" {
			fn(manifest, ws)
		}
		var ls []string
		if err := json.Unmarshal([]byte(layers), &ls); err != nil {
			return fmt.Errorf("snapshot layers of %s: %w", k, err)
		}
		for _, l := range ls {
			fn(l, ws)
		}
	}
	return rows.Err()
}

// RemoveSnapshot deletes a receipt and returns it. The newest receipt of a workspace that is not
// deleted is refused (CodeConflict): reopen restores from it. Removing an older receipt never
// changes which is the newest, so concurrent removals cannot take the newest between them; the
// workspace's row is locked anyway, so the check reads the state the removal commits under.
func (s *DB) RemoveSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return api.Snapshot{}, err
	}
	defer tx.Rollback()
	snap, err := scanSnapshot(tx.QueryRowContext(ctx, s.d.q(`SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return snap, notFound("snapshot", id)
	}
	if err != nil {
		return snap, err
	}
	var state api.WorkspaceState
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT state FROM workspaces WHERE id = ?`+s.d.forUpdate), snap.WorkspaceID).Scan(&state); err != nil {
		return snap, fmt.Errorf("lock the workspace of snapshot %s: %w", id, err)
	}
	if state != api.StateDeleted {
		var newest string
		if err := tx.QueryRowContext(ctx, s.d.q(`SELECT id FROM snapshots WHERE workspace_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`),
			snap.WorkspaceID).Scan(&newest); err != nil {
			return snap, err
		}
		if newest == id {
			return snap, protocol.Errorf(protocol.CodeConflict,
				"snapshot %s is the newest receipt of workspace %s, which is %s: reopen restores from it (remove the workspace with --purge to remove it)",
				id, snap.WorkspaceID, state)
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`DELETE FROM snapshots WHERE id = ?`), id); err != nil {
		return snap, fmt.Errorf("remove snapshot receipt: %w", err)
	}
	return snap, tx.Commit()
}

// ReclaimSnapshot marks the receipt's object reclaimed at at; a receipt already marked keeps its
// first time.
func (s *DB) ReclaimSnapshot(ctx context.Context, id string, at time.Time) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE snapshots SET reclaimed_at = ? WHERE id = ? AND reclaimed_at IS NULL`), at.UTC(), id)
	if err != nil {
		return fmt.Errorf("reclaim snapshot: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	// Nothing changed: already reclaimed (fine) or no such receipt.
	_, err = s.GetSnapshot(ctx, id)
	return err
}
