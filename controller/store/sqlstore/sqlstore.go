// Package sqlstore implements store.Store on database/sql: SQLite (pure Go) is the embedded
// default, PostgreSQL (pgx) serves several controllers. One set of queries serves both (see
// dialect); the schema is a list of numbered migrations (see migrate.go).
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DB is a store.Store on a SQL database.
type DB struct {
	db    *sql.DB
	d     *dialect
	clock clockwork.Clock
}

var _ store.Store = (*DB)(nil)

// Option configures a store as it opens.
type Option func(*DB)

// WithClock makes the store read the time from clock (the real clock by default): the instants
// it records and the one lease expiry is judged against. Every instant is computed here and
// passed to the database as a parameter; no query reads the database server's clock.
func WithClock(clock clockwork.Clock) Option {
	return func(s *DB) { s.clock = clock }
}

// now is the store's time, in UTC.
func (s *DB) now() time.Time { return s.clock.Now().UTC() }

// Open opens the store storeURL names: "" is SQLite in dataDir (tether.db), postgres://… or
// postgresql://… a PostgreSQL database (see OpenPostgres).
func Open(ctx context.Context, storeURL, dataDir string, opts ...Option) (*DB, error) {
	switch {
	case storeURL == "":
		return OpenSQLite(ctx, filepath.Join(dataDir, "tether.db"), opts...)
	case strings.HasPrefix(storeURL, "postgres://"), strings.HasPrefix(storeURL, "postgresql://"):
		return OpenPostgres(ctx, storeURL, opts...)
	}
	scheme, _, _ := strings.Cut(storeURL, ":")
	return nil, fmt.Errorf("store URL with scheme %q: want postgres://… (or none, for SQLite in the data dir)", scheme)
}

// OpenSQLite opens (creating when missing) the SQLite database at path.
func OpenSQLite(ctx context.Context, path string, opts ...Option) (*DB, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One connection: SQLite allows one writer, and a single connection keeps writes serialized
	// without busy retries.
	db.SetMaxOpenConns(1)
	return open(ctx, db, sqliteDialect, opts)
}

// open migrates db and wraps it; it closes db on failure.
func open(ctx context.Context, db *sql.DB, d *dialect, opts []Option) (*DB, error) {
	s := &DB{db: db, d: d, clock: clockwork.NewRealClock()}
	for _, o := range opts {
		o(s)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *DB) Close() error { return s.db.Close() }

func notFound(kind, id string) error {
	return protocol.Errorf(protocol.CodeNotFound, "%s %q not found", kind, id)
}

func (s *DB) CreateWorkspace(ctx context.Context, w api.Workspace, a store.Allocation) error {
	if !wsstate.Known(w.State) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "workspace %s: unknown state %q", w.ID, w.State)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM workspaces WHERE name = ? AND state <> 'deleted'`), w.Name).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", w.Name)
	}
	projectID, git, branch, err := workspaceGit(w.Git)
	if err != nil {
		return err
	}
	if projectID != "" {
		if err := tx.QueryRowContext(ctx, s.d.q(`SELECT COUNT(*) FROM workspaces WHERE project_id = ? AND branch = ?
			AND state <> 'deleted' AND state <> 'failed'`), projectID, branch).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return branchTaken(branch)
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO workspaces (id, name, provider, state, reason, allocation_id, project_id, git, branch, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), w.ID, w.Name, w.Provider, string(w.State), w.Reason, w.AllocationID, projectID, git, branch,
		w.CreatedAt.UTC(), w.UpdatedAt.UTC()); err != nil {
		switch s.d.uniqueConstraint(err) { // a concurrent create got there since the counts
		case "workspaces_live_name":
			return protocol.Errorf(protocol.CodeExists, "a workspace named %q already exists", w.Name)
		case liveBranchIndex:
			return branchTaken(branch)
		}
		return fmt.Errorf("insert workspace: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO allocations (id, workspace_id, provider, state, root, bootstrap_hash, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), a.ID, a.WorkspaceID, a.Provider, a.State, a.Root, a.BootstrapHash, a.CreatedAt.UTC(), a.UpdatedAt.UTC()); err != nil {
		return fmt.Errorf("insert allocation: %w", err)
	}
	if err := s.addEvent(ctx, tx, w.ID, "", w.State, "created", w.CreatedAt.UTC()); err != nil {
		return err
	}
	return tx.Commit()
}

// workspaceCols are the columns scanWorkspace reads, from workspaces w joined with its current
// allocation a.
const workspaceCols = `w.id, w.name, w.provider, w.state, w.reason, w.allocation_id, COALESCE(a.root, ''), w.epoch,
	w.git, w.reclaimed_at, w.created_at, w.updated_at`

// workspaceFrom is the FROM clause every workspaceCols query uses.
const workspaceFrom = ` FROM workspaces w LEFT JOIN allocations a ON a.id = w.allocation_id `

func branchTaken(branch string) error {
	return protocol.Errorf(protocol.CodeConflict, "branch %q already has a live workspace in this project", branch)
}

func scanWorkspace(row interface{ Scan(...any) error }) (api.Workspace, error) {
	var w api.Workspace
	var git string
	var reclaimed sql.NullTime
	if err := row.Scan(&w.ID, &w.Name, &w.Provider, &w.State, &w.Reason, &w.AllocationID, &w.Root, &w.Epoch,
		&git, &reclaimed, &w.CreatedAt, &w.UpdatedAt); err != nil {
		return w, err
	}
	w.CreatedAt, w.UpdatedAt = w.CreatedAt.UTC(), w.UpdatedAt.UTC()
	w.ReclaimedAt = timePtr(reclaimed)
	if git != "" {
		w.Git = new(api.WorkspaceGit)
		if err := json.Unmarshal([]byte(git), w.Git); err != nil {
			return w, fmt.Errorf("workspace %s git: %w", w.ID, err)
		}
	}
	return w, nil
}

func (s *DB) GetWorkspace(ctx context.Context, id string) (api.Workspace, error) {
	w, err := scanWorkspace(s.db.QueryRowContext(ctx, s.d.q(`SELECT `+workspaceCols+workspaceFrom+`
		WHERE w.id = ? OR (w.name = ? AND w.state <> 'deleted')
		ORDER BY w.id = ? DESC LIMIT 1`), id, id, id))
	if errors.Is(err, sql.ErrNoRows) {
		return w, notFound("workspace", id)
	}
	return w, err
}

func (s *DB) ListWorkspaces(ctx context.Context, all bool) ([]api.Workspace, error) {
	return queryAll(ctx, s, scanWorkspace, `SELECT `+workspaceCols+workspaceFrom+`
		WHERE ? OR w.state <> 'deleted' ORDER BY w.created_at, w.id`, all)
}

// TransitionWorkspace makes the transition of ev (see wsstate) in one transaction. The row is
// read locked (PostgreSQL FOR UPDATE; SQLite's transactions hold the write lock from their start)
// so the event names the state actually left, and the UPDATE is guarded by the event's from
// states, so of any number of racing transitions from one state exactly one wins.
func (s *DB) TransitionWorkspace(ctx context.Context, id string, ev wsstate.Event, reason, cause string) error {
	t, ok := wsstate.Lookup(ev)
	if !ok {
		return protocol.Errorf(protocol.CodeInvalidArgument, "workspace %s: no transition %q in the state machine", id, ev)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var cur api.WorkspaceState
	if err := tx.QueryRowContext(ctx, s.d.q(`SELECT state FROM workspaces WHERE id = ?`+s.d.forUpdate), id).Scan(&cur); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("workspace", id)
		}
		return err
	}
	conflict := func() error {
		from := make([]string, len(t.From))
		for i, f := range t.From {
			from[i] = string(f)
		}
		return protocol.Errorf(protocol.CodeConflict, "workspace %s is %s, not %s (%s)", id, cur, strings.Join(from, " or "), ev)
	}
	if !t.Allows(cur) {
		return conflict()
	}
	now := s.now()
	args := []any{string(t.To), reason, now, id}
	for _, f := range t.From {
		args = append(args, string(f))
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(t.From)), ", ")
	res, err := tx.ExecContext(ctx, s.d.q(`UPDATE workspaces SET state = ?, reason = ?, updated_at = ? WHERE id = ? AND state IN (`+in+`)`), args...)
	if err != nil {
		return fmt.Errorf("transition workspace: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return conflict() // not reached while the row is locked; the guard makes it safe anyway
	}
	if err := s.addEvent(ctx, tx, id, cur, t.To, cause, now); err != nil {
		return err
	}
	return tx.Commit()
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

const allocationCols = `id, workspace_id, provider, state, root, bootstrap_hash, bootstrap_used, session_hash, pending_session_hash, runner_version, created_at, updated_at`

func scanAllocation(row interface{ Scan(...any) error }) (store.Allocation, error) {
	var a store.Allocation
	err := row.Scan(&a.ID, &a.WorkspaceID, &a.Provider, &a.State, &a.Root, &a.BootstrapHash, &a.BootstrapUsed,
		&a.SessionHash, &a.PendingSessionHash, &a.RunnerVersion, &a.CreatedAt, &a.UpdatedAt)
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, err
}

func (s *DB) GetAllocation(ctx context.Context, id string) (store.Allocation, error) {
	a, err := scanAllocation(s.db.QueryRowContext(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, notFound("allocation", id)
	}
	return a, err
}

// UpdateAllocation never takes an allocation out of a final state (destroyed; failed, except to
// destroyed): the condition is in the UPDATE itself, so a writer that read "connected" a moment
// before someone destroyed the allocation cannot bring it back to life — and with it the
// session token a destroyed allocation's runner holds.
func (s *DB) UpdateAllocation(ctx context.Context, id, state, root, runnerVersion string) error {
	res, err := s.db.ExecContext(ctx, s.d.q(`UPDATE allocations SET state = ?, root = CASE WHEN CAST(? AS TEXT) = '' THEN root ELSE ? END,
		runner_version = CASE WHEN CAST(? AS TEXT) = '' THEN runner_version ELSE ? END, updated_at = ?
		WHERE id = ? AND (state NOT IN (?, ?) OR state = ? OR (state = ? AND CAST(? AS TEXT) = ?))`),
		state, root, root, runnerVersion, runnerVersion, s.now(), id,
		store.AllocDestroyed, store.AllocFailed, state, store.AllocFailed, state, store.AllocDestroyed)
	if err := affected(res, err, "allocation", id); protocol.CodeOf(err) != protocol.CodeNotFound {
		return err
	}
	a, err := s.GetAllocation(ctx, id)
	if err != nil {
		return err
	}
	return protocol.Errorf(protocol.CodeConflict, "allocation %s is %s, which it stays: it cannot become %s", id, a.State, state)
}

func (s *DB) BootstrapAllocation(ctx context.Context, h string) (store.Allocation, error) {
	a, err := scanAllocation(s.db.QueryRowContext(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE bootstrap_hash = ?`), h))
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
	if a.State == store.AllocDestroyed || a.State == store.AllocFailed {
		return a, protocol.Errorf(protocol.CodeRevoked, "allocation %s is %s", a.ID, a.State)
	}
	return a, nil
}

func (s *DB) AllocationBySession(ctx context.Context, h string) (store.Allocation, error) {
	if h == "" {
		return store.Allocation{}, protocol.Errorf(protocol.CodeUnauthorized, "empty session token")
	}
	a, err := scanAllocation(s.db.QueryRowContext(ctx, s.d.q(`SELECT `+allocationCols+` FROM allocations WHERE session_hash = ? OR pending_session_hash = ?`), h, h))
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
	_, err = s.db.ExecContext(ctx, s.d.q(`INSERT INTO runs (id, workspace_id, allocation_id, argv, cwd, state, epoch, kind, output, started_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, r.WorkspaceID, r.AllocationID, string(argv), r.Cwd, r.State, int64(r.Epoch), r.Kind, storableText(r.Output), r.StartedAt.UTC())
	return err
}

func (s *DB) FinishRun(ctx context.Context, id, state string, exitCode *int, signal int, errMsg string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, s.d.q(`UPDATE runs SET state = ?, exit_code = ?, signal = ?, error = ?, finished_at = ? WHERE id = ?`),
		state, exitCode, signal, errMsg, at.UTC(), id)
	return affected(res, err, "run", id)
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

// queryAll runs a query and scans every row with scan; an empty result is an empty slice, so
// it encodes as [] rather than null.
func queryAll[T any](ctx context.Context, s *DB, scan func(interface{ Scan(...any) error }) (T, error), query string, args ...any) ([]T, error) {
	rows, err := s.db.QueryContext(ctx, s.d.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (s *DB) ListRuns(ctx context.Context, workspaceID string) ([]api.Run, error) {
	return s.listRuns(ctx, `workspace_id = ?`, workspaceID)
}

func (s *DB) RunningRuns(ctx context.Context, allocationID string) ([]api.Run, error) {
	return s.listRuns(ctx, `allocation_id = ? AND state = 'running'`, allocationID)
}
