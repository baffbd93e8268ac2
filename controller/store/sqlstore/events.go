package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func init() {
	addMigration(4, "workspace events",
		`CREATE TABLE workspace_events (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id), seq {int64} NOT NULL,
			at {ts} NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL, cause TEXT NOT NULL)`,
		`CREATE INDEX workspace_events_ws ON workspace_events(workspace_id, seq)`,
	)
}

// addEvent records a transition inside tx. seq orders events of one workspace even when two
// share a timestamp.
func (s *DB) addEvent(ctx context.Context, tx *sql.Tx, workspaceID string, from, to api.WorkspaceState, cause string, at time.Time) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	_, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO workspace_events (id, workspace_id, seq, at, from_state, to_state, cause)
		VALUES (?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM workspace_events WHERE workspace_id = ?), ?, ?, ?, ?)`),
		"ev_"+hex.EncodeToString(b[:]), workspaceID, workspaceID, at.UTC(), string(from), string(to), cause)
	if err != nil {
		return fmt.Errorf("record event: %w", err)
	}
	return nil
}

func (s *DB) ListEvents(ctx context.Context, workspaceID string) ([]api.Event, error) {
	rows, err := s.query(ctx, s.d.q(`SELECT at, from_state, to_state, cause FROM workspace_events WHERE workspace_id = ? ORDER BY seq`), workspaceID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []api.Event{}
	for rows.Next() {
		var e api.Event
		if err := rows.Scan(&e.At, &e.From, &e.To, &e.Cause); err != nil {
			return nil, err
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *DB) RecordEvent(ctx context.Context, workspaceID, cause string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var state api.WorkspaceState
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT state FROM workspaces WHERE id = ?`+s.d.forUpdate), workspaceID).Scan(&state); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("workspace", workspaceID)
		}
		return err
	}
	if err := s.addEvent(ctx, tx, workspaceID, state, state, cause, s.now()); err != nil {
		return err
	}
	return tx.Commit()
}
