package sqlstore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/storetest"
	"github.com/tetherhq/tether/protocol"
)

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		db, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "tether.db"))
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}

func TestSQLiteSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tether.db")
	db, err := sqlstore.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2021, 5, 6, 7, 8, 9, 500000000, time.UTC)
	w, a := storetest.Fixture("keep", at, "bootstrap-keep")
	if err := db.CreateWorkspace(ctx, w, a); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimBootstrap(ctx, a.BootstrapHash, "session-keep"); err != nil {
		t.Fatal(err)
	}
	if err := db.UpdateAllocation(ctx, a.ID, store.AllocConnected, "/root/keep", "9.9"); err != nil {
		t.Fatal(err)
	}
	code := 4
	run := api.Run{ID: "run-keep", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"make", "test"}, State: api.RunRunning, StartedAt: at}
	if err := db.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := db.FinishRun(ctx, run.ID, api.RunExited, &code, 0, "", at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = sqlstore.OpenSQLite(ctx, path) // migrations run again on an existing database
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	gw, err := db.GetWorkspace(ctx, "keep")
	if err != nil || gw.ID != w.ID || gw.Root != "/root/keep" || !gw.CreatedAt.Equal(at) {
		t.Fatalf("workspace after reopen: %+v, %v", gw, err)
	}
	ga, err := db.AllocationBySession(ctx, "session-keep")
	if err != nil || ga.ID != a.ID || !ga.BootstrapUsed || ga.RunnerVersion != "9.9" {
		t.Fatalf("allocation after reopen: %+v, %v", ga, err)
	}
	// A used token stays used across restarts.
	if _, err := db.ClaimBootstrap(ctx, a.BootstrapHash, "again"); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("claim after reopen: %v; want unauthorized", err)
	}
	gr, err := db.GetRun(ctx, run.ID)
	if err != nil || gr.State != api.RunExited || gr.ExitCode == nil || *gr.ExitCode != 4 || len(gr.Argv) != 2 {
		t.Fatalf("run after reopen: %+v, %v", gr, err)
	}
	// The unique live-name rule survives too.
	w2, a2 := storetest.Fixture("keep", at, "bootstrap-keep-2")
	if err := db.CreateWorkspace(ctx, w2, a2); protocol.CodeOf(err) != protocol.CodeExists {
		t.Fatalf("duplicate name after reopen: %v; want exists", err)
	}
}
