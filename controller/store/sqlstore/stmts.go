package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// SQLite parses every query it is handed: modernc's driver prepares a statement per call, and a
// request on a hot path (the service proxy reads a workspace and its services per request)
// spent a third of its time in SQLite's parser. The store's statements are a fixed set of
// texts, so SQLite keeps each prepared once. PostgreSQL's driver (pgx) caches statements per
// connection itself.

// maxCachedStmts bounds the cache: the store has about a hundred distinct statements; a text
// built per call (an IN list of some length) past the bound is run unprepared.
const maxCachedStmts = 512

type stmtCache struct {
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	closed bool
}

// prepared returns the cached statement of query, preparing it on first use; nil when the
// store does not cache (PostgreSQL), the cache is full, or the prepare failed (the unprepared
// call then reports the error).
func (s *DB) prepared(ctx context.Context, query string) *sql.Stmt {
	if s.d != sqliteDialect {
		return nil
	}
	c := &s.stmts
	c.mu.Lock()
	st, ok := c.m[query]
	full := c.closed || len(c.m) >= maxCachedStmts
	c.mu.Unlock()
	if ok {
		return st
	}
	if full {
		return nil
	}
	// Prepared outside the lock: the prepare waits for SQLite's one connection, which a caller
	// of a cached statement may be holding.
	st, err := s.db.PrepareContext(context.WithoutCancel(ctx), query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.m[query]; ok || c.closed {
		st.Close()
		return prev // nil once closed
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st
}

// close closes the cached statements; later calls run unprepared.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// query is s.db.QueryContext through the statement cache.
func (s *DB) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := s.prepared(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.db.QueryContext(ctx, query, args...)
}

// queryRow is s.db.QueryRowContext through the statement cache.
func (s *DB) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := s.prepared(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.db.QueryRowContext(ctx, query, args...)
}

// exec is s.db.ExecContext through the statement cache.
func (s *DB) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := s.prepared(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return s.db.ExecContext(ctx, query, args...)
}
