package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/storetest"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// TestCreateProjectNameRace: of 20 projects created at once under one name, one is recorded;
// the others are refused with exists (on PostgreSQL some of them by the unique constraint).
func TestCreateProjectNameRace(t *testing.T) {
	eachDriver(t, "pool_max_conns=32", func(t *testing.T, _ driver, _ string, s *sqlstore.DB) {
		ctx := context.Background()
		var wg sync.WaitGroup
		var mu sync.Mutex
		created := 0
		start := make(chan struct{})
		for i := range 20 {
			wg.Go(func() {
				p := api.Project{ID: fmt.Sprintf("prj_%d", i), Name: "same", Source: "/src", BaseRef: "main",
					Mode: api.ModeIsolated, CreatedAt: time.Now()}
				<-start
				err := s.CreateProject(ctx, p)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					created++
				} else if protocol.CodeOf(err) != protocol.CodeExists {
					t.Errorf("refused create: %v; want exists", err)
				}
			})
		}
		close(start)
		wg.Wait()
		list, err := s.ListProjects(ctx)
		if created != 1 || err != nil || len(list) != 1 {
			t.Fatalf("%d creates succeeded, %d recorded (%v); want 1", created, len(list), err)
		}
	})
}

// TestMigrateProjects: a database of schema version 6 with records in it is brought to the
// latest version; its old records read back with no project, no reclaim marks and no output,
// and the new columns work on them.
func TestMigrateProjects(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			where := d.fresh(t, "")
			restore := sqlstore.UseMigrations(6)
			old, err := d.open(ctx, where)
			restore()
			if err != nil {
				t.Fatalf("open at version 6: %v", err)
			}
			at := time.Date(2023, 7, 8, 9, 10, 11, 0, time.UTC)
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO workspaces (id, name, provider, state, reason, allocation_id, epoch, created_at, updated_at)
					VALUES ('ws_old', 'old', 'local', 'closed', '', 'al_old', 3, ?, ?)`, []any{at, at}},
				{`INSERT INTO allocations (id, workspace_id, provider, state, bootstrap_hash, created_at, updated_at)
					VALUES ('al_old', 'ws_old', 'local', 'destroyed', 'bootstrap-old', ?, ?)`, []any{at, at}},
				{`INSERT INTO runs (id, workspace_id, allocation_id, argv, state, epoch, started_at)
					VALUES ('run_old', 'ws_old', 'al_old', '["true"]', 'exited', 3, ?)`, []any{at}},
				{`INSERT INTO snapshots (id, workspace_id, epoch, object_key, bytes, sha256, encrypted, summary, created_at)
					VALUES ('snap_old', 'ws_old', 3, 'snapshots/old', 1, 'ab', ?, '{}', ?)`, []any{false, at}},
			} {
				if _, err := sqlstore.Exec(ctx, old, q.sql, q.args...); err != nil {
					t.Fatalf("%s: %v", q.sql, err)
				}
			}
			old.Close()

			s, err := d.open(ctx, where)
			if err != nil {
				t.Fatalf("migrate from version 6: %v", err)
			}
			defer s.Close()
			if v, err := sqlstore.SchemaVersions(ctx, s); err != nil || len(v) != sqlstore.LatestVersion() {
				t.Fatalf("schema versions: %v, %v", v, err)
			}
			w, err := s.GetWorkspace(ctx, "old")
			if err != nil || w.ID != "ws_old" || w.Git != nil || w.ReclaimedAt != nil || w.Epoch != 3 {
				t.Fatalf("old workspace: %+v, %v", w, err)
			}
			if r, err := s.GetRun(ctx, "run_old"); err != nil || r.Kind != "" || r.Output != "" {
				t.Fatalf("old run: %+v, %v", r, err)
			}
			if keys, err := s.SnapshotObjectKeys(ctx); err != nil || !keys["snapshots/old"] {
				t.Fatalf("old receipt's key: %v, %v", keys, err)
			}
			if _, ok, err := s.OpenWorkspaceFor(ctx, "", ""); ok || err != nil {
				t.Fatalf("a workspace of no project is open for the empty project: %v, %v", ok, err)
			}
			if err := s.TransitionWorkspace(ctx, w.ID, wsstate.StartReclaim, "", "gc"); err != nil {
				t.Fatal(err)
			}
			if err := s.SetWorkspaceReclaimed(ctx, w.ID, at.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := s.ReclaimSnapshot(ctx, "snap_old", at.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if keys, _ := s.SnapshotObjectKeys(ctx); keys["snapshots/old"] {
				t.Fatal("a reclaimed receipt's key is still kept")
			}
			if err := s.SetRunOutput(ctx, "run_old", "teardown", "ok\n"); err != nil {
				t.Fatal(err)
			}
			// New project workspaces sit beside the old one.
			nw, na := storetest.Fixture("new", at, "bootstrap-new")
			nw.Git = &api.WorkspaceGit{ProjectID: "prj_x", Mode: api.ModeShared, Branch: "main"}
			if err := s.CreateWorkspace(ctx, nw, na); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := s.OpenWorkspaceFor(ctx, "prj_x", "main"); err != nil || !ok || got.ID != nw.ID {
				t.Fatalf("open workspace of the new project: %+v, %v, %v", got.ID, ok, err)
			}
		})
	}
}
