package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/storetest"
	"github.com/tetherhq/tether/protocol"
)

// A driver is one database the store runs on. The tests below run on each.
type driver struct {
	name string
	// fresh returns where an empty store for t lives (a file path or a URL); extra is added to
	// a PostgreSQL URL's query.
	fresh func(t *testing.T, extra string) string
	open  func(ctx context.Context, where string, opts ...sqlstore.Option) (*sqlstore.DB, error)
}

var drivers = []driver{
	{"SQLite", func(t *testing.T, _ string) string { return filepath.Join(t.TempDir(), "tether.db") }, sqlstore.OpenSQLite},
	{"Postgres", freshPostgres, sqlstore.OpenPostgres},
}

// eachDriver runs fn as a subtest per driver, with an open, empty store closed at the end.
func eachDriver(t *testing.T, extra string, fn func(t *testing.T, d driver, where string, s *sqlstore.DB)) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			where := d.fresh(t, extra)
			s, err := d.open(context.Background(), where)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			fn(t, d, where, s)
		})
	}
}

// TestRotateSessionRace: 50 connections presenting one bootstrap token at once, each confirming
// the session it was issued, ten times over: exactly one confirmation wins each time, the other
// rotations are unauthorized or their tokens dead.
func TestRotateSessionRace(t *testing.T) {
	eachDriver(t, "pool_max_conns=64", func(t *testing.T, _ driver, _ string, s *sqlstore.DB) {
		ctx := context.Background()
		for round := range 10 {
			w, a := storetest.Fixture(fmt.Sprintf("race%d", round), time.Now(), fmt.Sprintf("bootstrap-race-%d", round))
			if err := s.CreateWorkspace(ctx, w, a); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var winners []string
			start := make(chan struct{})
			for i := range 50 {
				wg.Go(func() {
					<-start
					session := fmt.Sprintf("session-%d-%d", round, i)
					_, err := s.RotateSession(ctx, a.ID, a.BootstrapHash, session)
					if err != nil {
						if protocol.CodeOf(err) != protocol.CodeUnauthorized {
							t.Errorf("losing rotation: %v; want unauthorized", err)
						}
						return
					}
					ok, err := s.ConfirmSession(ctx, a.ID, session)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("confirm: %v", err)
					} else if ok {
						winners = append(winners, session)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(winners) != 1 {
				t.Fatalf("round %d: %d winners %v; want exactly 1", round, len(winners), winners)
			}
			if got, err := s.GetAllocation(ctx, a.ID); err != nil || !got.BootstrapUsed || got.SessionHash != winners[0] || got.PendingSessionHash != "" {
				t.Fatalf("round %d: allocation %+v, %v; want confirmed by %s", round, got, err, winners[0])
			}
			if _, err := s.BootstrapAllocation(ctx, a.BootstrapHash); protocol.CodeOf(err) != protocol.CodeUnauthorized {
				t.Fatalf("round %d: bootstrap token after the race: %v; want unauthorized", round, err)
			}
		}
	})
}

// TestCreateWorkspaceNameRace: of 20 workspaces created at once under one name, one is
// recorded; the others are refused with exists.
func TestCreateWorkspaceNameRace(t *testing.T) {
	eachDriver(t, "pool_max_conns=32", func(t *testing.T, _ driver, _ string, s *sqlstore.DB) {
		ctx := context.Background()
		var wg sync.WaitGroup
		var mu sync.Mutex
		created := 0
		start := make(chan struct{})
		for i := range 20 {
			wg.Go(func() {
				w, a := storetest.Fixture("same", time.Now(), fmt.Sprintf("bootstrap-same-%d", i))
				<-start
				err := s.CreateWorkspace(ctx, w, a)
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
		list, err := s.ListWorkspaces(ctx, true)
		if created != 1 || err != nil || len(list) != 1 {
			t.Fatalf("%d creates succeeded, %d recorded (%v); want 1", created, len(list), err)
		}
	})
}

// TestConcurrentOpen: controllers starting together on one empty database each migrate it
// without tripping over the others, and every step is applied once.
func TestConcurrentOpen(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) { concurrentOpen(t, d) })
	}
}

func concurrentOpen(t *testing.T, d driver) {
	where := d.fresh(t, "")
	ctx := context.Background()
	const n = 8
	dbs := make([]*sqlstore.DB, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			dbs[i], errs[i] = d.open(ctx, where)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if dbs[i] != nil {
			t.Cleanup(func() { dbs[i].Close() })
		}
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
	}
	want := sqlstore.Versions()
	if got, err := sqlstore.SchemaVersions(ctx, dbs[0]); err != nil || !slices.Equal(got, want) {
		t.Fatalf("schema_migrations = %v, %v; want %v", got, err, want)
	}
	// All of them work on the same records.
	w, a := storetest.Fixture("shared", time.Now(), "bootstrap-shared")
	if err := dbs[3].CreateWorkspace(ctx, w, a); err != nil {
		t.Fatal(err)
	}
	if got, err := dbs[5].GetWorkspace(ctx, "shared"); err != nil || got.ID != w.ID {
		t.Fatalf("workspace from another handle: %+v, %v", got, err)
	}
}

// TestNewerSchemaRefused: a binary does not run on a database migrated past what it knows.
func TestNewerSchemaRefused(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, d driver, where string, s *sqlstore.DB) {
		ctx := context.Background()
		next := sqlstore.HighestVersion() + 1
		if _, err := sqlstore.Exec(ctx, s, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			next, "from the future", time.Now().UTC()); err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, err := d.open(ctx, where)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", next)) {
			t.Fatalf("open of a newer database: %v; want refused", err)
		}
	})
}

// TestTimesUTC: instants given in any zone are stored as instants and read back in UTC, at
// microsecond precision.
func TestTimesUTC(t *testing.T) {
	// The session time zone of a PostgreSQL connection must not matter.
	eachDriver(t, "timezone=Asia/Kathmandu", func(t *testing.T, _ driver, _ string, s *sqlstore.DB) {
		ctx := context.Background()
		zone := time.FixedZone("UTC-7", -7*3600)
		at := time.Date(2024, 2, 29, 23, 30, 0, 654321000, zone)
		w, a := storetest.Fixture("zoned", at, "bootstrap-zoned")
		if err := s.CreateWorkspace(ctx, w, a); err != nil {
			t.Fatal(err)
		}
		run := api.Run{ID: "run-zoned", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"true"}, State: api.RunRunning, StartedAt: at}
		if err := s.CreateRun(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunExited, At: at.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		gw, err := s.GetWorkspace(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		ga, _ := s.GetAllocation(ctx, a.ID)
		gr, _ := s.GetRun(ctx, run.ID)
		if gr.FinishedAt == nil {
			t.Fatalf("run not finished: %+v", gr)
		}
		for _, c := range []struct {
			what      string
			got, want time.Time
		}{
			{"workspace created", gw.CreatedAt, at}, {"workspace updated", gw.UpdatedAt, at},
			{"allocation created", ga.CreatedAt, at}, {"run started", gr.StartedAt, at},
			{"run finished", *gr.FinishedAt, at.Add(time.Minute)},
		} {
			if c.got.Location() != time.UTC || !c.got.Equal(c.want) {
				t.Errorf("%s = %v; want %v in UTC", c.what, c.got, c.want.UTC())
			}
		}
	})
}

// TestSnapshotReceipts: the receipts' columns round-trip (sizes past 4 GiB, epochs past 2^32).
func TestSnapshotReceipts(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, _ driver, _ string, s *sqlstore.DB) {
		ctx := context.Background()
		at := time.Date(2022, 3, 4, 5, 6, 7, 890000000, time.UTC)
		w, a := storetest.Fixture("snaps", at, "bootstrap-snaps")
		if err := s.CreateWorkspace(ctx, w, a); err != nil {
			t.Fatal(err)
		}
		mk := func(id string, epoch uint64, bytes int64, enc bool, created time.Time) api.Snapshot {
			snap := api.Snapshot{ID: id, WorkspaceID: w.ID, Epoch: epoch, Parent: "", ObjectKey: "objects/" + id,
				Bytes: bytes, SHA256: strings.Repeat("ab", 32), Encrypted: enc, CreatedAt: created}
			snap.Summary.Entries = 42
			if err := s.CreateSnapshot(ctx, snap); err != nil {
				t.Fatalf("CreateSnapshot(%s): %v", id, err)
			}
			return snap
		}
		second := mk("snap-b", 1<<40, 5<<30, true, at.Add(time.Second))
		first := mk("snap-a", 1, 0, false, at)
		got, err := s.GetSnapshot(ctx, second.ID)
		if err != nil || got.Epoch != second.Epoch || got.Bytes != second.Bytes || !got.Encrypted || got.Entries != 42 ||
			got.SHA256 != second.SHA256 || got.CreatedAt.Location() != time.UTC || !got.CreatedAt.Equal(second.CreatedAt) {
			t.Fatalf("snapshot = %+v, %v\nwant %+v", got, err, second)
		}
		list, err := s.ListSnapshots(ctx, w.ID)
		if err != nil || len(list) != 2 || list[0].ID != first.ID || list[1].ID != second.ID || list[0].Encrypted {
			t.Fatalf("ListSnapshots = %+v, %v", list, err)
		}
		keys, err := s.SnapshotObjectKeys(ctx)
		if err != nil || len(keys) != 2 || !keys[first.ObjectKey] || !keys[second.ObjectKey] {
			t.Fatalf("SnapshotObjectKeys = %v, %v", keys, err)
		}
		dup := second
		dup.ID = "snap-c"
		if err := s.CreateSnapshot(ctx, dup); err == nil {
			t.Fatal("a second receipt for one object was accepted")
		}
		_, err = s.GetSnapshot(ctx, "snap-missing")
		if protocol.CodeOf(err) != protocol.CodeNotFound {
			t.Fatalf("missing snapshot: %v; want not found", err)
		}
	})
}

// TestSurvivesReopen: records, used tokens and the live-name rule outlive the process, and
// migrations run again on an existing database.
func TestSurvivesReopen(t *testing.T) {
	eachDriver(t, "", func(t *testing.T, d driver, where string, db *sqlstore.DB) {
		ctx := context.Background()
		at := time.Date(2021, 5, 6, 7, 8, 9, 500000000, time.UTC)
		w, a := storetest.Fixture("keep", at, "bootstrap-keep")
		if err := db.CreateWorkspace(ctx, w, a); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RotateSession(ctx, a.ID, a.BootstrapHash, "session-keep"); err != nil {
			t.Fatal(err)
		}
		if ok, err := db.ConfirmSession(ctx, a.ID, "session-keep"); err != nil || !ok {
			t.Fatalf("confirm: %v, %v", ok, err)
		}
		if err := db.UpdateAllocation(ctx, a.ID, store.AllocConnected, "/root/keep", "9.9"); err != nil {
			t.Fatal(err)
		}
		code := 4
		run := api.Run{ID: "run-keep", WorkspaceID: w.ID, AllocationID: a.ID, Argv: []string{"make", "test"}, State: api.RunRunning, StartedAt: at}
		if err := db.CreateRun(ctx, run); err != nil {
			t.Fatal(err)
		}
		if err := db.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunExited, ExitCode: &code, At: at.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		db, err := d.open(ctx, where)
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
		if _, err := db.RotateSession(ctx, a.ID, a.BootstrapHash, "again"); protocol.CodeOf(err) != protocol.CodeUnauthorized {
			t.Fatalf("bootstrap rotation after reopen: %v; want unauthorized", err)
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
	})
}
