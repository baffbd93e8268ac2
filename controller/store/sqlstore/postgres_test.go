package sqlstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/storetest"
)

// TestPostgres runs the shared suite against a real PostgreSQL, a fresh database per subtest.
func TestPostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock clockwork.Clock) store.Store {
		db, err := sqlstore.OpenPostgres(context.Background(), freshPostgres(t, ""), sqlstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}

// TestPostgresColumnTypes: the schema uses PostgreSQL's own types, not SQLite's.
func TestPostgresColumnTypes(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.OpenPostgres(ctx, freshPostgres(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct{ table, column, want string }{
		{"workspaces", "created_at", "timestamp with time zone"},
		{"runs", "finished_at", "timestamp with time zone"},
		{"allocations", "bootstrap_used", "boolean"},
		{"snapshots", "bytes", "bigint"},
		{"snapshots", "epoch", "bigint"},
		{"snapshots", "encrypted", "boolean"},
		{"snapshots", "reclaimed_at", "timestamp with time zone"},
		{"workspaces", "reclaimed_at", "timestamp with time zone"},
		{"projects", "created_at", "timestamp with time zone"},
		{"allocations", "owner_since", "timestamp with time zone"},
		{"allocations", "ready_by", "timestamp with time zone"},
		{"members", "heartbeat_at", "timestamp with time zone"},
		{"tokens", "expires_at", "timestamp with time zone"},
		{"tokens", "revoked_at", "timestamp with time zone"},
		{"uploads", "touched_at", "timestamp with time zone"},
		{"upload_sessions", "size", "bigint"},
		{"upload_sessions", "received", "bigint"},
		{"upload_sessions", "replace_existing", "boolean"},
		{"upload_sessions", "expires_at", "timestamp with time zone"},
	} {
		var got string
		err := sqlstore.QueryRow(ctx, db, `SELECT data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?`, c.table, c.column).Scan(&got)
		if err != nil || got != c.want {
			t.Errorf("%s.%s is %q (%v); want %s", c.table, c.column, got, err, c.want)
		}
	}
}

// TestPostgresProjectNameConstraint: the unique constraint on projects.name has the name
// CreateProject maps to exists (a create racing past the name check hits it).
func TestPostgresProjectNameConstraint(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.OpenPostgres(ctx, freshPostgres(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	err = sqlstore.QueryRow(ctx, db, `SELECT c.conname FROM pg_constraint c JOIN pg_attribute a
		ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
		WHERE c.conrelid = 'projects'::regclass AND c.contype = 'u' AND a.attname = 'name'`).Scan(&got)
	if err != nil || got != sqlstore.ProjectNameConstraint {
		t.Fatalf("unique constraint on projects.name is %q (%v); want %q", got, err, sqlstore.ProjectNameConstraint)
	}
}

// TestOpenURL: Open picks the store from the URL and never repeats a password in its errors.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := os.Stat(filepath.Join(dir, "tether.db")); err != nil {
		t.Fatalf("empty URL did not make the SQLite database in the data dir: %v", err)
	}
	for _, u := range []string{
		"mysql://tether:hunter2@db.example/tether",
		"postgres://tether:hunter2@127.0.0.1:1/tether?sslmode=disable&connect_timeout=5",
		"postgres://tether:hunter2@127.0.0.1:1/tether?pool_max_conns=zero",
		"postgres://tether:hunter2@127.0.0.1:1/tether?sslmode=bogus",
		"postgres://tether:hunter2@[::1/tether",
	} {
		_, err := sqlstore.Open(ctx, u, dir)
		if err == nil {
			t.Fatalf("Open(%s) succeeded", u)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%s) error shows the password: %v", u, err)
		}
	}
	// A PostgreSQL URL opens PostgreSQL.
	pgURL := freshPostgres(t, "")
	db, err = sqlstore.Open(ctx, pgURL, dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", pgURL, err)
	}
	defer db.Close()
	if v, err := sqlstore.SchemaVersions(ctx, db); err != nil || len(v) != sqlstore.LatestVersion() {
		t.Fatalf("schema versions on PostgreSQL: %v, %v", v, err)
	}
}
