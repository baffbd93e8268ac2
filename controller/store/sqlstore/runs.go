package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Version 17: a run keeps the idempotency key it was started with, unique per workspace; runs
// started without one keep NULL, which the index does not count.
func init() {
	addMigration(17, "run idempotency keys",
		`ALTER TABLE runs ADD COLUMN idempotency_key TEXT NULL`,
		`CREATE UNIQUE INDEX `+runKeyIndex+` ON runs(workspace_id, idempotency_key)`,
	)
}

// runKeyIndex is the unique index on a workspace's run idempotency keys.
const runKeyIndex = "runs_idempotency_key"

// CreateRun records r. Two creates with one key race to the index: on SQLite writers are
// serialized and the second insert fails on it, on PostgreSQL the index refuses it by name;
// either way the loser gets CodeExists and looks the winner up.
func (s *DB) CreateRun(ctx context.Context, r api.Run) error {
	argv, err := json.Marshal(r.Argv)
	if err != nil {
		return err
	}
	var key any
	if r.IdempotencyKey != "" {
		key = r.IdempotencyKey
	}
	_, err = s.exec(ctx, s.d.q(`INSERT INTO runs (id, workspace_id, allocation_id, argv, cwd, state, epoch, kind, output, started_at, idempotency_key)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, r.WorkspaceID, r.AllocationID, string(argv), r.Cwd, r.State, int64(r.Epoch), r.Kind, storableText(r.Output), r.StartedAt.UTC(), key)
	if err != nil && key != nil {
		// SQLite names no constraint (uniqueConstraint is ""): the key's run existing says it.
		if s.d.uniqueConstraint(err) == runKeyIndex {
			return runKeyTaken(r.IdempotencyKey)
		}
		if _, gerr := s.RunByIdempotencyKey(ctx, r.WorkspaceID, r.IdempotencyKey); gerr == nil {
			return runKeyTaken(r.IdempotencyKey)
		}
	}
	return err
}

func runKeyTaken(key string) error {
	return protocol.Errorf(protocol.CodeExists, "a run with idempotency key %q exists", key)
}

func (s *DB) RunByIdempotencyKey(ctx context.Context, workspaceID, key string) (api.Run, error) {
	r, err := scanRun(s.queryRow(ctx, s.d.q(`SELECT `+runCols+` FROM runs WHERE workspace_id = ? AND idempotency_key = ?`), workspaceID, key))
	if errors.Is(err, sql.ErrNoRows) {
		return r, protocol.Errorf(protocol.CodeNotFound, "no run of workspace %s has idempotency key %q", workspaceID, key)
	}
	return r, err
}

func (s *DB) FinishRun(ctx context.Context, f store.RunFinish) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE runs SET state = ?, exit_code = ?, signal = ?, error = ?, finished_at = ? WHERE id = ?`),
		f.State, f.ExitCode, f.Signal, f.Error, f.At.UTC(), f.ID)
	return affected(res, err, "run", f.ID)
}

const runCols = `id, workspace_id, allocation_id, argv, cwd, state, epoch, exit_code, signal, error, started_at, finished_at, kind, output, idempotency_key`

func scanRun(row interface{ Scan(...any) error }) (api.Run, error) {
	var r api.Run
	var argv string
	var exit sql.NullInt64
	var finished sql.NullTime
	var key sql.NullString
	if err := row.Scan(&r.ID, &r.WorkspaceID, &r.AllocationID, &argv, &r.Cwd, &r.State, &r.Epoch, &exit, &r.Signal, &r.Error, &r.StartedAt, &finished,
		&r.Kind, &r.Output, &key); err != nil {
		return r, err
	}
	r.IdempotencyKey = key.String
	r.StartedAt = r.StartedAt.UTC()
	if err := json.Unmarshal([]byte(argv), &r.Argv); err != nil {
		return r, fmt.Errorf("run %s argv: %w", r.ID, err)
	}
	if exit.Valid {
		c := int(exit.Int64)
		r.ExitCode = &c
	}
	if finished.Valid {
		t := finished.Time.UTC()
		r.FinishedAt = &t
	}
	return r, nil
}

func (s *DB) GetRun(ctx context.Context, id string) (api.Run, error) {
	r, err := scanRun(s.queryRow(ctx, s.d.q(`SELECT `+runCols+` FROM runs WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, notFound("run", id)
	}
	return r, err
}

func (s *DB) listRuns(ctx context.Context, q string, arg string) ([]api.Run, error) {
	return queryAll(ctx, s, scanRun, `SELECT `+runCols+` FROM runs WHERE `+q+` ORDER BY started_at, id`, arg)
}

func (s *DB) ListRuns(ctx context.Context, workspaceID string) ([]api.Run, error) {
	return s.listRuns(ctx, `workspace_id = ?`, workspaceID)
}

func (s *DB) RunningRuns(ctx context.Context, allocationID string) ([]api.Run, error) {
	return s.listRuns(ctx, `allocation_id = ? AND state = 'running'`, allocationID)
}

// SetRunOutput records a run's kind and the tail of its output (see storableText).
func (s *DB) SetRunOutput(ctx context.Context, id, kind, output string) error {
	res, err := s.exec(ctx, s.d.q(`UPDATE runs SET kind = ?, output = ? WHERE id = ?`), kind, storableText(output), id)
	return affected(res, err, "run", id)
}
