package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// What controllers sharing a PostgreSQL database coordinate with: session advisory locks and
// LISTEN/NOTIFY. Both live on a connection taken out of the pool for as long as they are needed,
// and that connection is closed rather than returned afterwards whenever the session might still
// hold a lock or listen: the pool would hand it to an unrelated query otherwise.

// allocationsChannel is the notification channel allocation changes are announced on (the
// payload is the allocation's id).
const allocationsChannel = "tether_allocations"

const (
	// listenBackoffMin and listenBackoffMax bound the wait before the listener reconnects after
	// its connection failed; it doubles with every failed attempt.
	listenBackoffMin = 250 * time.Millisecond
	listenBackoffMax = 10 * time.Second
	// unlockTimeout bounds the release of a cluster lock; past it the connection is dropped,
	// which frees the lock as well.
	unlockTimeout = 10 * time.Second
)

// lockKey is the advisory lock key of a cluster lock: the first 8 bytes of a SHA-256 of its name,
// prefixed so that tether's keys are unlikely to meet those of other users of the database
// (and distinct from migrationLockKey, which is a transaction lock anyway).
func lockKey(name string) int64 {
	sum := sha256.Sum256([]byte("tether lock " + name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// discard closes the database connection behind conn instead of returning it to the pool (the
// session ends, and with it its locks and LISTEN).
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// advisoryLock takes the session advisory lock of name on a connection of its own, kept until
// the returned unlock. If that connection dies, the server frees the lock.
func (s *DB) advisoryLock(ctx context.Context, name string) (unlock func(), ok bool, err error) {
	key := lockKey(name)
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("cluster lock %q: %w", name, err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		// Whether the server granted it is unknown (ctx may have ended after it did): ending the
		// session frees it if so.
		discard(conn)
		return nil, false, fmt.Errorf("cluster lock %q: %w", name, err)
	}
	if !ok {
		_ = conn.Close()
		return nil, false, nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		defer cancel()
		var unlocked bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&unlocked); err != nil || !unlocked {
			discard(conn) // the session died, or is in a state not worth reusing
			return
		}
		_ = conn.Close()
	}, true, nil
}

// listenConn takes a connection out of the pool and listens on it.
func (s *DB) listenConn(ctx context.Context) (*sql.Conn, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `LISTEN `+allocationsChannel); err != nil {
		discard(conn)
		return nil, err
	}
	return conn, nil
}

// listen is the store's listener: it hands what conn receives to the watchers until conn fails,
// then listens on a new connection after a backoff, until Close. Notifications sent while it
// had no connection are lost; watchers re-read records now and then for that.
func (s *DB) listen(conn *sql.Conn) {
	defer s.wg.Done()
	backoff := listenBackoffMin
	for {
		if conn != nil {
			s.receive(conn)
			conn = nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-s.bg.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c, err := s.listenConn(s.bg)
		if err != nil {
			backoff = min(2*backoff, listenBackoffMax)
			continue
		}
		conn, backoff = c, listenBackoffMin
	}
}

// receive waits for notifications on conn and sends their payloads to the watchers, until conn
// fails or the store closes; then it drops conn. The error is not reported: the store has no log,
// and listen reconnects.
func (s *DB) receive(conn *sql.Conn) {
	_ = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("%w: listen on a %T, not a pgx connection", driver.ErrBadConn, dc)
		}
		c := sc.Conn()
		for {
			n, err := c.WaitForNotification(s.bg)
			if n != nil && n.Channel == allocationsChannel {
				s.watch.send(n.Payload)
			}
			if err != nil {
				// ErrBadConn: database/sql closes the connection rather than pool it.
				return fmt.Errorf("%w: %w", driver.ErrBadConn, err)
			}
		}
	})
	_ = conn.Close()
}
