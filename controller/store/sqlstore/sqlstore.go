// Package sqlstore implements store.Store on database/sql. SQLite (pure Go) is the embedded default.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DB is a store.Store on a SQL database.
type DB struct {
	db  *sql.DB
	now func() time.Time
}

var _ store.Store = (*DB)(nil)

// OpenSQLite opens (creating when missing) the SQLite database at path.
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One connection: SQLite allows one writer, and a single connection keeps writes serialized
	// without busy retries.
	db.SetMaxOpenConns(1)
	s := &DB{db: db, now: func() time.Time { return time.Now().UTC() }}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *DB) Close() error { return s.db.Close() }

var schema = []string{
	`CREATE TABLE IF NOT EXISTS workspaces (
		id TEXT PRIMARY KEY, name TEXT NOT NULL, provider TEXT NOT NULL, state TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '', allocation_id TEXT NOT NULL,
		created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS workspaces_live_name ON workspaces(name) WHERE state <> 'deleted'`,
	`CREATE TABLE IF NOT EXISTS allocations (
		id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id), provider TEXT NOT NULL,
		state TEXT NOT NULL, root TEXT NOT NULL DEFAULT '',
		bootstrap_hash TEXT NOT NULL UNIQUE, bootstrap_used INTEGER NOT NULL DEFAULT 0,
		session_hash TEXT NOT NULL DEFAULT '', runner_version TEXT NOT NULL DEFAULT '',
		created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS allocations_session ON allocations(session_hash)`,
	`CREATE TABLE IF NOT EXISTS runs (
		id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id),
		allocation_id TEXT NOT NULL, argv TEXT NOT NULL, cwd TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,
		exit_code INTEGER, signal INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '',
		started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP)`,
	`CREATE INDEX IF NOT EXISTS runs_workspace ON runs(workspace_id, started_at)`,
}

func (s *DB) migrate(ctx context.Context) error {
	for _, q := range schema {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

func notFound(kind, id string) error {
	return protocol.Errorf(protocol.CodeNotFound, "%s %q not found", kind, id)
}

func (s *DB) CreateWorkspace(ctx context.Context, w api.Workspace, a store.Allocation) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM workspaces WHERE name = ? AND state <> 'deleted'`, w.Name).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", w.Name)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO workspaces (id, name, provider, state, reason, allocation_id, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, w.ID, w.Name, w.Provider, w.State, w.Reason, w.AllocationID, w.CreatedAt.UTC(), w.UpdatedAt.UTC()); err != nil {
		return fmt.Errorf("insert workspace: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO allocations (id, workspace_id, provider, state, root, bootstrap_hash, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, a.ID, a.WorkspaceID, a.Provider, a.State, a.Root, a.BootstrapHash, a.CreatedAt.UTC(), a.UpdatedAt.UTC()); err != nil {
		return fmt.Errorf("insert allocation: %w", err)
	}
	return tx.Commit()
}

const workspaceCols = `w.id, w.name, w.provider, w.state, w.reason, w.allocation_id, COALESCE(a.root, ''), w.created_at, w.updated_at`

func scanWorkspace(row interface{ Scan(...any) error }) (api.Workspace, error) {
	var w api.Workspace
	err := row.Scan(&w.ID, &w.Name, &w.Provider, &w.State, &w.Reason, &w.AllocationID, &w.Root, &w.CreatedAt, &w.UpdatedAt)
	return w, err
}

func (s *DB) GetWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	w, err := scanWorkspace(s.db.QueryRowContext(ctx, `SELECT `+workspaceCols+`
		FROM workspaces w LEFT JOIN allocations a ON a.id = w.allocation_id WHERE w.id = ? OR (w.name = ? AND w.state <> 'deleted')
		ORDER BY w.id = ? DESC LIMIT 1`, id, id, id))
	if errors.Is(err, sql.ErrNoRows) {
		return w, notFound("workspace", id)
	}
	return w, err
}

func (s *DB) ListWorkspaces(ctx context.Context, all bool) ([]api.Workspace, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+workspaceCols+`
		FROM workspaces w LEFT JOIN allocations a ON a.id = w.allocation_id
		WHERE ? OR w.state <> 'deleted' ORDER BY w.created_at, w.id`, all)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []api.Workspace{}
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func (s *DB) UpdateWorkspace(ctx context.Context, id, state, reason string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE workspaces SET state = ?, reason = ?, updated_at = ? WHERE id = ?`, state, reason, s.now(), id)
	return affected(res, err, "workspace", id)
}

func affected(res sql.Result, err error, kind, id string) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound(kind, id)
	}
	return nil
}

const allocationCols = `id, workspace_id, provider, state, root, bootstrap_hash, bootstrap_used, session_hash, runner_version, created_at, updated_at`

func scanAllocation(row interface{ Scan(...any) error }) (store.Allocation, error) {
	var a store.Allocation
	err := row.Scan(&a.ID, &a.WorkspaceID, &a.Provider, &a.State, &a.Root, &a.BootstrapHash, &a.BootstrapUsed,
		&a.SessionHash, &a.RunnerVersion, &a.CreatedAt, &a.UpdatedAt)
	return a, err
}

func (s *DB) GetAllocation(ctx context.Context, id string) (store.Allocation, error) {
	a, err := scanAllocation(s.db.QueryRowContext(ctx, `SELECT `+allocationCols+` FROM allocations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, notFound("allocation", id)
	}
	return a, err
}

func (s *DB) UpdateAllocation(ctx context.Context, id, state, root, runnerVersion string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE allocations SET state = ?, root = CASE WHEN ? = '' THEN root ELSE ? END,
		runner_version = CASE WHEN ? = '' THEN runner_version ELSE ? END, updated_at = ? WHERE id = ?`,
		state, root, root, runnerVersion, runnerVersion, s.now(), id)
	return affected(res, err, "allocation", id)
}

func (s *DB) ClaimBootstrap(ctx context.Context, h, sessionHash string) (store.Allocation, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Allocation{}, err
	}
	defer tx.Rollback()
	a, err := scanAllocation(tx.QueryRowContext(ctx, `SELECT `+allocationCols+` FROM allocations WHERE bootstrap_hash = ?`, h))
	if errors.Is(err, sql.ErrNoRows) {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "unknown runner token")
	}
	if err != nil {
		return a, err
	}
	if a.BootstrapUsed {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used")
	}
	if a.State == store.AllocDestroyed || a.State == store.AllocFailed {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	res, err := tx.ExecContext(ctx, `UPDATE allocations SET bootstrap_used = 1, session_hash = ?, updated_at = ? WHERE id = ? AND bootstrap_used = 0`,
		sessionHash, s.now(), a.ID)
	if err != nil {
		return a, err
	}
	// Only the claim that flipped the flag wins, whatever the isolation level.
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used")
	}
	a.BootstrapUsed, a.SessionHash = true, sessionHash
	return a, tx.Commit()
}

func (s *DB) BootstrapAllocation(ctx context.Context, h string) (store.Allocation, error) {
	a, err := scanAllocation(s.db.QueryRowContext(ctx, `SELECT `+allocationCols+` FROM allocations WHERE bootstrap_hash = ?`, h))
	if errors.Is(err, sql.ErrNoRows) {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "unknown runner token")
	}
	if err != nil {
		return a, err
	}
	if a.BootstrapUsed {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "runner token was already used")
	}
	if a.State == store.AllocDestroyed || a.State == store.AllocFailed {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	return a, nil
}

func (s *DB) AllocationBySession(ctx context.Context, h string) (store.Allocation, error) {
	if h == "" {
		return store.Allocation{}, protocol.Errorf(protocol.CodeUnauthorized, "empty session token")
	}
	a, err := scanAllocation(s.db.QueryRowContext(ctx, `SELECT `+allocationCols+` FROM allocations WHERE session_hash = ?`, h))
	if errors.Is(err, sql.ErrNoRows) {
		return a, protocol.Errorf(protocol.CodeUnauthorized, "unknown runner token")
	}
	if err != nil {
		return a, err
	}
	if a.State == store.AllocDestroyed || a.State == store.AllocFailed {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	return a, nil
}

func (s *DB) CreateRun(ctx context.Context, r api.Run) error {
	argv, err := json.Marshal(r.Argv)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO runs (id, workspace_id, allocation_id, argv, cwd, state, started_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.WorkspaceID, r.AllocationID, string(argv), r.Cwd, r.State, r.StartedAt.UTC())
	return err
}

func (s *DB) FinishRun(ctx context.Context, id, state string, exitCode *int, signal int, errMsg string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE runs SET state = ?, exit_code = ?, signal = ?, error = ?, finished_at = ? WHERE id = ?`,
		state, exitCode, signal, errMsg, at.UTC(), id)
	return affected(res, err, "run", id)
}

const runCols = `id, workspace_id, allocation_id, argv, cwd, state, exit_code, signal, error, started_at, finished_at`

func scanRun(row interface{ Scan(...any) error }) (api.Run, error) {
	var r api.Run
	var argv string
	var exit sql.NullInt64
	var finished sql.NullTime
	if err := row.Scan(&r.ID, &r.WorkspaceID, &r.AllocationID, &argv, &r.Cwd, &r.State, &exit, &r.Signal, &r.Error, &r.StartedAt, &finished); err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(argv), &r.Argv); err != nil {
		return r, fmt.Errorf("run %s argv: %w", r.ID, err)
	}
	if exit.Valid {
		c := int(exit.Int64)
		r.ExitCode = &c
	}
	if finished.Valid {
		t := finished.Time
		r.FinishedAt = &t
	}
	return r, nil
}

func (s *DB) GetRun(ctx context.Context, id string) (api.Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, notFound("run", id)
	}
	return r, err
}

func (s *DB) listRuns(ctx context.Context, q string, arg string) ([]api.Run, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE `+q+` ORDER BY started_at, id`, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []api.Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *DB) ListRuns(ctx context.Context, workspaceID string) ([]api.Run, error) {
	return s.listRuns(ctx, `workspace_id = ?`, workspaceID)
}

func (s *DB) RunningRuns(ctx context.Context, allocationID string) ([]api.Run, error) {
	return s.listRuns(ctx, `allocation_id = ? AND state = 'running'`, allocationID)
}
