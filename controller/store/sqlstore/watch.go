package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errClosed is what the store's coordination says once Close was called.
var errClosed = errors.New("sqlstore: the store is closed")

// watchBuffer is how many ids a watcher's channel holds; further ones are dropped until it reads
// (delivery is best effort: a watcher re-reads records anyway).
const watchBuffer = 64

// watchHub fans allocation ids out to the watchers of one *DB. On SQLite the writers send to it
// directly; on PostgreSQL one listener goroutine does, with what the database delivers, so a
// change made by any controller sharing the database reaches every watcher.
type watchHub struct {
	mu     sync.Mutex
	subs   map[chan string]func() bool // a watcher's channel → stops the end of its context closing it
	closed bool

	// start serializes starting the PostgreSQL listener, which connects without holding mu;
	// Close takes it too, so no listener starts after Close stopped the store's goroutines.
	start     sync.Mutex
	listening bool
}

// WatchAllocations subscribes to the ids of changed allocations until ctx ends, when the channel
// is closed (as it is when the store closes). On PostgreSQL the first watch starts the store's
// listener, and fails if it cannot listen: after that, the listener reconnects on its own.
func (s *DB) WatchAllocations(ctx context.Context) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.d.shared {
		if err := s.startListener(ctx); err != nil {
			return nil, err
		}
	}
	return s.watch.subscribe(ctx)
}

// startListener starts the PostgreSQL listener unless it runs. Its first connection is made
// here, so that a watch that returned already hears the changes that follow it.
func (s *DB) startListener(ctx context.Context) error {
	h := &s.watch
	h.start.Lock()
	defer h.start.Unlock()
	if h.listening {
		return nil
	}
	if s.bg.Err() != nil {
		return errClosed
	}
	conn, err := s.listenConn(ctx)
	if err != nil {
		return fmt.Errorf("watch allocations: %w", err)
	}
	h.listening = true
	s.wg.Add(1)
	go s.listen(conn)
	return nil
}

// stopListener stops the store's goroutines, with no listener starting meanwhile.
func (s *DB) stopListener() {
	s.watch.start.Lock()
	defer s.watch.start.Unlock()
	s.stopBg()
}

func (h *watchHub) subscribe(ctx context.Context) (<-chan string, error) {
	ch := make(chan string, watchBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errClosed
	}
	if h.subs == nil {
		h.subs = map[chan string]func() bool{}
	}
	// The watcher ends with its context, without a goroutine waiting for it meanwhile. (Should
	// ctx be done already, the function runs at once, in a goroutine that waits for mu.)
	h.subs[ch] = context.AfterFunc(ctx, func() { h.unsubscribe(ch) })
	return ch, nil
}

func (h *watchHub) unsubscribe(ch chan string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

// send delivers ids to every watcher that has room for them. Sends never block, so a watcher
// that does not read cannot stall a writer or the listener; mu makes them safe against a
// watcher's channel being closed.
func (h *watchHub) send(ids ...string) {
	if len(ids) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		for _, id := range ids {
			select {
			case ch <- id:
			default:
			}
		}
	}
}

// close ends every watch, and every later one before it starts.
func (h *watchHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch, stop := range h.subs {
		stop()
		close(ch)
	}
	h.subs = nil
}
