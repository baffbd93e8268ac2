package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// migrationLockKey is the pg_advisory_xact_lock key migrations take ("tether schema").
const migrationLockKey int64 = 0x7465746865720001

// DefaultPostgresConns is how many connections one controller keeps to PostgreSQL at most,
// unless the URL says otherwise (pool_max_conns).
const DefaultPostgresConns = 16

var postgresDialect = &dialect{
	name:   "postgres",
	dollar: true,
	// TIMESTAMPTZ keeps the instant (in UTC) whatever the session's time zone.
	types:     strings.NewReplacer("{ts}", "TIMESTAMPTZ", "{bool}", "BOOLEAN", "{false}", "FALSE", "{int64}", "BIGINT"),
	forUpdate: " FOR UPDATE",
	lock: func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey)
		return err
	},
	shared: true,
	// The notifications are queued by the statement and delivered when it commits, to every
	// session listening (the listener of each controller, this one's included).
	announce: func(update string) string {
		return `WITH changed AS (` + update + ` RETURNING id) SELECT changed.id FROM changed, pg_notify('` + allocationsChannel + `', changed.id)`
	},
	uniqueConstraint: func(err error) string {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
			return pe.ConstraintName
		}
		return ""
	},
}

// deadPeerParams make the server notice a controller that went away without closing its
// connections (a network partition, a host that died) within seconds instead of the kernel's
// default of two hours of keepalive silence: a cluster lock is a session advisory lock, and a
// partitioned controller that held one (the upkeep lock, which disowns the runners of
// controllers whose heartbeat expired) kept it from every other controller for as long as the
// server believed its session alive. Each session asks for them at its start; the URL may set
// its own.
var deadPeerParams = map[string]string{
	"tcp_keepalives_idle":     "5",     // seconds of silence before the first probe
	"tcp_keepalives_interval": "2",     // seconds between probes
	"tcp_keepalives_count":    "3",     // probes unanswered before the session ends
	"tcp_user_timeout":        "10000", // ms data may go unacknowledged (PostgreSQL 12+)
}

// OpenPostgres opens the PostgreSQL database rawURL names (postgres://USER:PASS@HOST:PORT/DB?…,
// with libpq's parameters: sslmode, connect_timeout, …) and migrates its schema. The extra
// parameter pool_max_conns bounds the connections this process opens (DefaultPostgresConns).
// Tables go to the connection's search_path (the public schema unless the URL sets one).
func OpenPostgres(ctx context.Context, rawURL string, opts ...Option) (*DB, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse errors quote the URL, password included: say only what is wrong.
		return nil, errors.New("postgres store: the URL does not parse (want postgres://USER:PASS@HOST:PORT/DB?sslmode=…)")
	}
	where := u.Redacted()
	maxConns := DefaultPostgresConns
	q := u.Query()
	if v := q.Get("pool_max_conns"); v != "" {
		if maxConns, err = strconv.Atoi(v); err != nil || maxConns < 1 {
			return nil, fmt.Errorf("postgres store %s: pool_max_conns=%q: want a positive number", where, v)
		}
		q.Del("pool_max_conns")
		u.RawQuery = q.Encode()
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	for k, v := range deadPeerParams {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	s, err := open(ctx, db, postgresDialect, opts)
	if err != nil {
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	return s, nil
}
