package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DB is a store.Store on a SQL database.
type DB struct {
	db    *sql.DB
	d     *dialect
	clock clockwork.Clock

	// bg is the context of the store's own goroutines (the PostgreSQL listener, counted in wg);
	// Close cancels it and waits for them.
	bg        context.Context
	stopBg    context.CancelFunc
	wg        sync.WaitGroup
	watch     watchHub  // the watchers of allocation changes
	locks     lockTable // the cluster locks this store holds
	stmts     stmtCache // SQLite's prepared statements
	closeOnce sync.Once
}

// DB implements every role of the store.
var (
	_ store.Store        = (*DB)(nil)
	_ store.Workspaces   = (*DB)(nil)
	_ store.Events       = (*DB)(nil)
	_ store.Allocations  = (*DB)(nil)
	_ store.Sessions     = (*DB)(nil)
	_ store.Runs         = (*DB)(nil)
	_ store.Snapshots    = (*DB)(nil)
	_ store.Leases       = (*DB)(nil)
	_ store.Artifacts    = (*DB)(nil)
	_ store.Services     = (*DB)(nil)
	_ store.Projects     = (*DB)(nil)
	_ store.Members      = (*DB)(nil)
	_ store.Tokens       = (*DB)(nil)
	_ store.Coordination = (*DB)(nil)
)

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
	// Opening a new database file from several handles at once (only tests do: a data dir
	// has one controller) can meet SQLITE_BUSY without the busy handler being asked — the
	// switch to WAL and the first write take locks SQLite will not wait for, to avoid a
	// deadlock. Such an open is tried again, briefly.
	for attempt, backoff := 1, 10*time.Millisecond; ; attempt, backoff = attempt+1, min(2*backoff, 200*time.Millisecond) {
		s, err := open(ctx, db, sqliteDialect, opts)
		if err == nil || !sqliteBusy(err) || attempt == 50 {
			return s, err
		}
		if db, err = sql.Open("sqlite", dsn); err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		db.SetMaxOpenConns(1)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			db.Close()
			return nil, fmt.Errorf("open sqlite %s: %w", path, ctx.Err())
		}
	}
}

// sqliteBusy says whether err is SQLite's SQLITE_BUSY (any extended code of it).
func sqliteBusy(err error) bool {
	var e interface{ Code() int }
	return errors.As(err, &e) && e.Code()&0xff == 5
}

// open migrates db and wraps it; it closes db on failure.
func open(ctx context.Context, db *sql.DB, d *dialect, opts []Option) (*DB, error) {
	s := &DB{db: db, d: d, clock: clockwork.NewRealClock()}
	s.bg, s.stopBg = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	if err := s.migrate(ctx); err != nil {
		s.stopBg()
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close ends every watch (closing its channel), releases the cluster locks still held, stops
// the store's goroutines and closes the database. Calling it again only closes the database again.
func (s *DB) Close() error {
	s.closeOnce.Do(func() {
		s.watch.close()
		s.stopListener()
		s.wg.Wait()
		s.locks.close()
		s.stmts.close()
	})
	return s.db.Close()
}

func notFound(kind, id string) error {
	return protocol.Errorf(protocol.CodeNotFound, "%s %q not found", kind, id)
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

// queryAll runs a query and scans every row with scan; an empty result is an empty slice, so
// it encodes as [] rather than null.
func queryAll[T any](ctx context.Context, s *DB, scan func(interface{ Scan(...any) error }) (T, error), query string, args ...any) ([]T, error) {
	rows, err := s.query(ctx, s.d.q(query), args...)
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
