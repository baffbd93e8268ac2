package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

func init() {
	addMigration(6, "services",
		`CREATE TABLE IF NOT EXISTS services (
			workspace_id TEXT NOT NULL REFERENCES workspaces(id), name TEXT NOT NULL,
			state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', port {int64} NOT NULL DEFAULT 0,
			restarts {int64} NOT NULL DEFAULT 0, pid {int64} NOT NULL DEFAULT 0,
			stderr_tail TEXT NOT NULL DEFAULT '', log_end {int64} NOT NULL DEFAULT 0, argv TEXT NOT NULL DEFAULT '[]',
			started_at {ts} NULL, ready_at {ts} NULL, stopped_at {ts} NULL, updated_at {ts} NOT NULL,
			PRIMARY KEY (workspace_id, name))`,
	)
}

const serviceCols = `workspace_id, name, state, reason, port, restarts, pid, stderr_tail, log_end, argv, started_at, ready_at, stopped_at, updated_at`

func scanService(row interface{ Scan(...any) error }) (api.Service, error) {
	var v api.Service
	var argv string
	var started, ready, stopped sql.NullTime
	if err := row.Scan(&v.WorkspaceID, &v.Name, &v.State, &v.Reason, &v.Port, &v.Restarts, &v.PID, &v.StderrTail, &v.LogEnd,
		&argv, &started, &ready, &stopped, &v.UpdatedAt); err != nil {
		return v, err
	}
	if err := json.Unmarshal([]byte(argv), &v.Argv); err != nil {
		return v, fmt.Errorf("service %s argv: %w", v.Name, err)
	}
	v.UpdatedAt = v.UpdatedAt.UTC()
	v.StartedAt, v.ReadyAt, v.StoppedAt = timePtr(started), timePtr(ready), timePtr(stopped)
	return v, nil
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// PutService inserts or replaces the record of a workspace's service.
func (s *DB) PutService(ctx context.Context, v api.Service) error {
	argv, err := json.Marshal(v.Argv)
	if err != nil {
		return err
	}
	if v.Argv == nil {
		argv = []byte("[]")
	}
	updated := v.UpdatedAt
	if updated.IsZero() {
		updated = s.now()
	}
	_, err = s.exec(ctx, s.d.q(`INSERT INTO services (`+serviceCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workspace_id, name) DO UPDATE SET state = excluded.state, reason = excluded.reason, port = excluded.port,
		restarts = excluded.restarts, pid = excluded.pid, stderr_tail = excluded.stderr_tail, log_end = excluded.log_end,
		argv = excluded.argv, started_at = excluded.started_at, ready_at = excluded.ready_at,
		stopped_at = excluded.stopped_at, updated_at = excluded.updated_at`),
		v.WorkspaceID, v.Name, v.State, v.Reason, int64(v.Port), int64(v.Restarts), int64(v.PID), v.StderrTail, v.LogEnd,
		string(argv), nullTime(v.StartedAt), nullTime(v.ReadyAt), nullTime(v.StoppedAt), updated.UTC())
	if err != nil {
		return fmt.Errorf("record service %s: %w", v.Name, err)
	}
	return nil
}

// ListServices lists a workspace's services by name.
func (s *DB) ListServices(ctx context.Context, workspaceID string) ([]api.Service, error) {
	return queryAll(ctx, s, scanService, `SELECT `+serviceCols+` FROM services WHERE workspace_id = ? ORDER BY name`, workspaceID)
}
