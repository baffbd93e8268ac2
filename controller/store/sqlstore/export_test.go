package sqlstore

import (
	"context"
	"database/sql"
)

// LatestVersion is the schema version this build migrates to.
func LatestVersion() int { return len(migrations) }

// Versions lists every migration version, in order (numbers may leave gaps: see ordered).
func Versions() []int {
	ms, err := ordered()
	if err != nil {
		panic(err)
	}
	vs := make([]int, len(ms))
	for i, m := range ms {
		vs[i] = m.version
	}
	return vs
}

// HighestVersion is the newest migration's version.
func HighestVersion() int {
	ms, err := ordered()
	if err != nil {
		panic(err)
	}
	return latest(ms)
}

// SchemaVersions lists the versions recorded in schema_migrations, in order.
func SchemaVersions(ctx context.Context, s *DB) ([]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Exec runs a statement written with `?` placeholders directly on the database.
func Exec(ctx context.Context, s *DB, q string, args ...any) (sql.Result, error) {
	return s.exec(ctx, s.d.q(q), args...)
}

// QueryRow runs a query written with `?` placeholders directly on the database.
func QueryRow(ctx context.Context, s *DB, q string, args ...any) *sql.Row {
	return s.queryRow(ctx, s.d.q(q), args...)
}

// UseMigrations makes stores opened from now on apply only the first n migrations (as an older
// build would), until restore is called. Tests of this package do not run in parallel.
func UseMigrations(n int) (restore func()) {
	all := migrations
	ms, err := ordered()
	if err != nil {
		panic(err)
	}
	migrations = ms[:n]
	return func() { migrations = all }
}

// ProjectNameConstraint is the unique constraint CreateProject recognizes on PostgreSQL.
const ProjectNameConstraint = projectNameConstraint
