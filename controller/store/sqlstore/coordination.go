package sqlstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Version 14: the blob uploads in progress, each with the controller writing it and when it
// last said so, so that a garbage sweep on any controller leaves objects being written alone.
func init() {
	addMigration(14, "upload heartbeats",
		`CREATE TABLE uploads (key TEXT PRIMARY KEY, controller TEXT NOT NULL, touched_at {ts} NOT NULL)`,
		`CREATE INDEX uploads_touched ON uploads(touched_at)`,
	)
}

// lockTable is the cluster locks one *DB holds. On SQLite it is the lock itself: the database
// belongs to one controller process. On PostgreSQL each lock is also a session advisory lock,
// which is what other controllers see; the table answers this store's own second attempt without
// a connection, and lets Close release what is still held.
type lockTable struct {
	mu     sync.Mutex
	held   map[string]func() // name → its release; nil while the database lock is being taken
	closed bool
}

// TryClusterLock takes the cluster lock name unless someone holds it. release is safe to call
// more than once, and after Close.
func (s *DB) TryClusterLock(ctx context.Context, name string) (release func(), ok bool, err error) {
	t := &s.locks
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, false, errClosed
	}
	if _, held := t.held[name]; held {
		t.mu.Unlock()
		return nil, false, nil
	}
	if t.held == nil {
		t.held = map[string]func(){}
	}
	t.held[name] = nil // reserved: a concurrent attempt of this store finds it held
	t.mu.Unlock()

	var unlock func()
	if s.d.shared {
		unlock, ok, err = s.advisoryLock(ctx, name)
		if err != nil || !ok {
			t.mu.Lock()
			delete(t.held, name)
			t.mu.Unlock()
			return nil, false, err
		}
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if unlock != nil {
				unlock() // first, so that this store cannot take it again before others can
			}
			t.mu.Lock()
			delete(t.held, name)
			t.mu.Unlock()
		})
	}
	t.mu.Lock()
	if t.closed { // Close ran meanwhile and did not see this lock
		t.mu.Unlock()
		release()
		return nil, false, errClosed
	}
	t.held[name] = release
	t.mu.Unlock()
	return release, true, nil
}

// close releases the locks still held and refuses new ones.
func (t *lockTable) close() {
	t.mu.Lock()
	t.closed = true
	var releases []func()
	for _, r := range t.held {
		if r != nil {
			releases = append(releases, r)
		}
	}
	t.mu.Unlock()
	for _, r := range releases {
		r()
	}
}

// TouchUpload records that controller is writing key now.
func (s *DB) TouchUpload(ctx context.Context, key, controller string) error {
	if _, err := s.exec(ctx, s.d.q(`INSERT INTO uploads (key, controller, touched_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET controller = excluded.controller, touched_at = excluded.touched_at`),
		key, controller, s.now()); err != nil {
		return fmt.Errorf("touch upload %s: %w", key, err)
	}
	return nil
}

// DoneUpload forgets key; an upload never touched is not an error.
func (s *DB) DoneUpload(ctx context.Context, key string) error {
	if _, err := s.exec(ctx, s.d.q(`DELETE FROM uploads WHERE key = ?`), key); err != nil {
		return fmt.Errorf("done upload %s: %w", key, err)
	}
	return nil
}

// LiveUploads lists the keys touched at or after since. Uploads a controller abandoned (it
// died) are never deleted: they stop being listed as since passes them.
func (s *DB) LiveUploads(ctx context.Context, since time.Time) (map[string]bool, error) {
	keys, err := queryAll(ctx, s, func(row interface{ Scan(...any) error }) (string, error) {
		var k string
		return k, row.Scan(&k)
	}, `SELECT key FROM uploads WHERE touched_at >= ?`, since.UTC())
	if err != nil {
		return nil, fmt.Errorf("live uploads: %w", err)
	}
	live := make(map[string]bool, len(keys))
	for _, k := range keys {
		live[k] = true
	}
	return live, nil
}
