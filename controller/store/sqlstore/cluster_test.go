package sqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
	"github.com/tetherhq/tether/controller/store/storetest"
)

// Controllers sharing one PostgreSQL database: each test opens two stores on it, as two
// controllers would.

func twoPostgres(t *testing.T) (a, b *sqlstore.DB) {
	t.Helper()
	where := freshPostgres(t, "")
	open := func() *sqlstore.DB {
		s, err := sqlstore.OpenPostgres(context.Background(), where)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), open()
}

// eventually retries try every 20ms until it reports true, for up to 15s (a bound on liveness,
// not a timing assertion).
func eventually(t *testing.T, what string, try func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); <-tick.C {
		if try() {
			return
		}
	}
	t.Fatalf("%s: not within 15s", what)
}

// terminate ends the database sessions of s's database that cond (a condition on
// pg_stat_activity a) selects, as a lost connection would, and returns how many.
func terminate(t *testing.T, s *sqlstore.DB, cond string) int {
	t.Helper()
	var n int
	if err := sqlstore.QueryRow(context.Background(), s, `SELECT COUNT(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND `+cond).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdsAdvisoryLock selects the sessions holding an advisory lock.
const holdsAdvisoryLock = `a.pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)`

// TestPostgresClusterLockAcrossStores: one holder across stores; release, a lost connection
// and a closed store each free the lock.
func TestPostgresClusterLockAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, b := twoPostgres(t)
	try := func(s *sqlstore.DB) (func(), bool) {
		t.Helper()
		release, ok, err := s.TryClusterLock(ctx, "gc")
		if err != nil {
			t.Fatal(err)
		}
		return release, ok
	}
	releaseA, ok := try(a)
	if !ok {
		t.Fatal("the first store could not take a free lock")
	}
	if _, ok := try(b); ok {
		t.Fatal("the second store took a held lock")
	}
	releaseA()
	releaseB, ok := try(b)
	if !ok {
		t.Fatal("the second store could not take the released lock")
	}
	if _, ok := try(a); ok {
		t.Fatal("the first store took the lock the second holds")
	}

	// The holder's connection dies: the server frees its lock, and releasing it later is safe.
	if n := terminate(t, a, holdsAdvisoryLock); n != 1 {
		t.Fatalf("%d sessions hold an advisory lock; want 1", n)
	}
	var releaseA2 func()
	eventually(t, "take the lock of a lost connection", func() bool {
		releaseA2, ok = try(a)
		return ok
	})
	releaseB()
	releaseB()
	if _, ok := try(b); ok {
		t.Fatal("the second store took the lock after releasing a lost one, while the first holds it")
	}

	// The holder closes without releasing: Close does.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	releaseA2() // after Close: harmless
	if _, ok := try(b); !ok {
		t.Fatal("the lock of a closed store is still held")
	}
	if _, _, err := a.TryClusterLock(ctx, "other"); err == nil {
		t.Fatal("TryClusterLock on a closed store succeeded")
	}
}

// TestPostgresWatchAcrossStores: a change made through one store reaches the watchers of the
// other, also after the watching store's listener lost its connection.
func TestPostgresWatchAcrossStores(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := twoPostgres(t)
	ch, err := b.WatchAllocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, al := storetest.Fixture("watched", time.Now(), "bootstrap-watched")
	if err := a.CreateWorkspace(ctx, w, al); err != nil {
		t.Fatal(err)
	}
	if err := a.ClaimAllocation(ctx, al.ID, "ctl-a", "/w", "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ch:
		if id != al.ID {
			t.Fatalf("watch on the other store delivered %q; want %q", id, al.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a claim through one store did not reach a watcher on the other")
	}

	if n := terminate(t, a, `a.query LIKE 'LISTEN %'`); n != 1 {
		t.Fatalf("terminated %d listening sessions; want 1", n)
	}
	// Notifications sent while the listener reconnects are lost: change the allocation until
	// one arrives.
	state := store.AllocDisconnected
	eventually(t, "a watch hears changes again after its listener's connection was lost", func() bool {
		if err := a.UpdateAllocation(ctx, al.ID, state, "", ""); err != nil {
			t.Fatal(err)
		}
		state = map[string]string{store.AllocDisconnected: store.AllocConnected, store.AllocConnected: store.AllocDisconnected}[state]
		select {
		case id, ok := <-ch:
			if !ok {
				t.Fatal("the watch ended when its listener's connection was lost")
			}
			return id == al.ID
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
}

// TestPostgresClusterSecretAcrossStores: controllers making the secret at once agree on it.
func TestPostgresClusterSecretAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, b := twoPostgres(t)
	secrets := make([]string, 8)
	var wg sync.WaitGroup
	for i := range secrets {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			var err error
			if secrets[i], err = s.ClusterSecret(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, s := range secrets {
		if s == "" || s != secrets[0] {
			t.Fatalf("secret #%d = %q; #0 = %q", i, s, secrets[0])
		}
	}
}

// TestPostgresSessionsNoticeADeadController: every session asks the server to probe a silent
// client within seconds, so a partitioned controller's session — and the cluster lock it may
// hold (upkeep's, which disowns the runners of dead controllers) — ends in about 11 s rather
// than after the kernel's two hours of keepalive silence. Over TCP the server applies them; the
// test server may listen on a unix socket, where it reports 0, so the settings are read as the
// session asked for them.
func TestPostgresSessionsNoticeADeadController(t *testing.T) {
	a, _ := twoPostgres(t)
	for name, want := range map[string]string{"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3", "tcp_user_timeout": "10000"} {
		var got string
		if err := sqlstore.QueryRow(context.Background(), a, `SELECT COALESCE((SELECT setting FROM pg_settings WHERE name = ? AND source = 'client'), 'unset')`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want && !(got == "0" && name != "tcp_user_timeout") {
			t.Errorf("%s = %s for the store's sessions; want %s", name, got, want)
		}
	}
}
