package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
)

func (s *DB) CreateRun(ctx context.Context, r api.Run) error {
	argv, err := json.Marshal(r.Argv)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.d.q(`INSERT INTO runs (id, workspace_id, allocation_id, argv, cwd, state, epoch, kind, output, started_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, r.WorkspaceID, r.AllocationID, string(argv), r.Cwd, r.State, int64(r.Epoch), r.Kind, storableText(r.Output), r.StartedAt.UTC())
	return err
}

func (s *DB) FinishRun(ctx context.Context, f store.RunFinish) error {
	res, err := s.db.ExecContext(ctx, s.d.q(`UPDATE runs SET state = ?, exit_code = ?, signal = ?, error = ?, finished_at = ? WHERE id = ?`),
		f.State, f.ExitCode, f.Signal, f.Error, f.At.UTC(), f.ID)
	return affected(res, err, "run", f.ID)
}

const runCols = `id, workspace_id, allocation_id, argv, cwd, state, epoch, exit_code, signal, error, started_at, finished_at, kind, output`

func scanRun(row interface{ Scan(...any) error }) (api.Run, error) {
	var r api.Run
	var argv string
	var exit sql.NullInt64
	var finished sql.NullTime
	if err := row.Scan(&r.ID, &r.WorkspaceID, &r.AllocationID, &argv, &r.Cwd, &r.State, &r.Epoch, &exit, &r.Signal, &r.Error, &r.StartedAt, &finished,
		&r.Kind, &r.Output); err != nil {
		return r, err
	}
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
	r, err := scanRun(s.db.QueryRowContext(ctx, s.d.q(`SELECT `+runCols+` FROM runs WHERE id = ?`), id))
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
	res, err := s.db.ExecContext(ctx, s.d.q(`UPDATE runs SET kind = ?, output = ? WHERE id = ?`), kind, storableText(output), id)
	return affected(res, err, "run", id)
}
