package sqlstore

import (
	"context"
	"fmt"
	"slices"
)

// A migration is one numbered step of the schema. Steps are applied in order, each once, and are
// recorded in schema_migrations. Never edit a step that has shipped: append a new one (the next
// version) with the change. Statements use the type tokens of dialect.types so one text serves
// every database. Feature files register their steps with addMigration from init.
type migration struct {
	version int
	name    string
	stmts   []string
}

var migrations []migration

func addMigration(version int, name string, stmts ...string) {
	migrations = append(migrations, migration{version: version, name: name, stmts: stmts})
}

// ordered returns the migrations by version, checking each version is positive and used once.
// A gap is allowed: work in parallel reserves its numbers ahead (a branch may hold 17 before 16
// is merged), and migrate applies every version not recorded, not only those above the highest.
func ordered() ([]migration, error) {
	ms := slices.Clone(migrations)
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version < 1 || (i > 0 && m.version == ms[i-1].version) {
			return nil, fmt.Errorf("migrations are misnumbered: version %d (%s) is not positive or is used twice", m.version, m.name)
		}
	}
	return ms, nil
}

// latest is the highest version of ms (ordered).
func latest(ms []migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Version 1 is the schema the store had before migrations were numbered; its statements use
// IF NOT EXISTS so a database created then is adopted as it is.
func init() {
	addMigration(1, "workspaces, allocations, runs",
		`CREATE TABLE IF NOT EXISTS workspaces (
			id TEXT PRIMARY KEY, name TEXT NOT NULL, provider TEXT NOT NULL, state TEXT NOT NULL,
			reason TEXT NOT NULL DEFAULT '', allocation_id TEXT NOT NULL,
			created_at {ts} NOT NULL, updated_at {ts} NOT NULL)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS workspaces_live_name ON workspaces(name) WHERE state <> 'deleted'`,
		`CREATE TABLE IF NOT EXISTS allocations (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id), provider TEXT NOT NULL,
			state TEXT NOT NULL, root TEXT NOT NULL DEFAULT '',
			bootstrap_hash TEXT NOT NULL UNIQUE, bootstrap_used {bool} NOT NULL DEFAULT {false},
			session_hash TEXT NOT NULL DEFAULT '', runner_version TEXT NOT NULL DEFAULT '',
			created_at {ts} NOT NULL, updated_at {ts} NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS allocations_session ON allocations(session_hash)`,
		`CREATE TABLE IF NOT EXISTS runs (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id),
			allocation_id TEXT NOT NULL, argv TEXT NOT NULL, cwd TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,
			exit_code INTEGER, signal INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '',
			started_at {ts} NOT NULL, finished_at {ts})`,
		`CREATE INDEX IF NOT EXISTS runs_workspace ON runs(workspace_id, started_at)`,
	)
}

// migrate brings the schema up to the latest version in one transaction. The dialect's lock (or
// SQLite's write lock) makes controllers starting together take turns: the first applies the
// steps, the others find them recorded. A database newer than this binary is refused.
func (s *DB) migrate(ctx context.Context) error {
	ms, err := ordered()
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if err := s.d.lock(ctx, tx); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.d.types.Replace(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at {ts} NOT NULL)`)); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	applied := map[int]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: %w", err)
		}
		if v > latest(ms) {
			rows.Close()
			return fmt.Errorf("the %s database has schema version %d; this tether knows versions up to %d: upgrade tether", s.d.name, v, latest(ms))
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(applied) == len(ms) {
		return nil
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		for _, q := range m.stmts {
			if _, err := tx.ExecContext(ctx, s.d.types.Replace(q)); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
			m.version, m.name, s.now()); err != nil {
			return fmt.Errorf("migration %d (%s): record: %w", m.version, m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
