package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/storetest"
)

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock clockwork.Clock) store.Store {
		db, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "tether.db"), sqlstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}

// TestSQLiteAdoptsUnversioned: a database made before migrations were numbered (the same tables,
// no schema_migrations) opens with its records and is recorded as up to date.
func TestSQLiteAdoptsUnversioned(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tether.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE workspaces (
			id TEXT PRIMARY KEY, name TEXT NOT NULL, provider TEXT NOT NULL, state TEXT NOT NULL,
			reason TEXT NOT NULL DEFAULT '', allocation_id TEXT NOT NULL,
			created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL)`,
		`CREATE UNIQUE INDEX workspaces_live_name ON workspaces(name) WHERE state <> 'deleted'`,
		`CREATE TABLE allocations (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id), provider TEXT NOT NULL,
			state TEXT NOT NULL, root TEXT NOT NULL DEFAULT '',
			bootstrap_hash TEXT NOT NULL UNIQUE, bootstrap_used INTEGER NOT NULL DEFAULT 0,
			session_hash TEXT NOT NULL DEFAULT '', runner_version TEXT NOT NULL DEFAULT '',
			created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL)`,
		`CREATE TABLE runs (
			id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL REFERENCES workspaces(id),
			allocation_id TEXT NOT NULL, argv TEXT NOT NULL, cwd TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,
			exit_code INTEGER, signal INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '',
			started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP)`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	w, a := storetest.Fixture("old", at, "bootstrap-old")
	if _, err := raw.Exec(`INSERT INTO workspaces VALUES (?, ?, ?, ?, '', ?, ?, ?)`, w.ID, w.Name, w.Provider, w.State, w.AllocationID, at, at); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO allocations (id, workspace_id, provider, state, bootstrap_hash, bootstrap_used, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 1, ?, ?)`, a.ID, a.WorkspaceID, a.Provider, a.State, a.BootstrapHash, at, at); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	db, err := sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatalf("open an unversioned database: %v", err)
	}
	defer db.Close()
	if got, err := sqlstore.SchemaVersions(ctx, db); err != nil || len(got) != sqlstore.LatestVersion() || !slices.IsSorted(got) {
		t.Fatalf("schema_migrations = %v, %v", got, err)
	}
	if got, err := db.GetWorkspace(ctx, "old"); err != nil || got.ID != w.ID || !got.CreatedAt.Equal(at) {
		t.Fatalf("old workspace: %+v, %v", got, err)
	}
	if got, err := db.GetAllocation(ctx, a.ID); err != nil || !got.BootstrapUsed {
		t.Fatalf("old allocation: %+v, %v", got, err)
	}
	if _, err := db.ListSnapshots(ctx, w.ID); err != nil {
		t.Fatalf("snapshots table missing after migration: %v", err)
	}
}
