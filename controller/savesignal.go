package controller

import (
	"context"
	"sync"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
)

// wsSignals wakes, in this process, whoever waits for a workspace's next receipt or change of
// state (a child created with --wait-for-save). A waiter takes the channel before it reads the
// store, so a change between its read and its wait is never missed; changes made by another
// controller of a cluster are seen by the waiter's periodic re-read instead.
type wsSignals struct {
	mu sync.Mutex
	m  map[string]*wsSignal
}

type wsSignal struct {
	ch      chan struct{}
	waiters int
}

func newWSSignals() *wsSignals { return &wsSignals{m: map[string]*wsSignal{}} }

// next returns a channel closed at workspace id's next change, and release, to call once the
// channel is no longer waited on (the entry goes with its last waiter, so a waiter that gives up
// leaves nothing behind).
func (w *wsSignals) next(id string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sig := w.m[id]
	if sig == nil {
		sig = &wsSignal{ch: make(chan struct{})}
		w.m[id] = sig
	}
	sig.waiters++
	var once sync.Once
	return sig.ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			sig.waiters--
			if sig.waiters == 0 && w.m[id] == sig {
				delete(w.m, id)
			}
		})
	}
}

// notify wakes every waiter of workspace id; later waiters get a new channel.
func (w *wsSignals) notify(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sig := w.m[id]; sig != nil {
		close(sig.ch)
		delete(w.m, id)
	}
}

// signalledStore is the state store that notifies signals of every receipt written and every
// change of state: every receipt is written by CreateSnapshot or AppendSnapshot and every change of state is
// made by TransitionWorkspace, so no caller of either needs a line of its own.
type signalledStore struct {
	store.Store
	signals *wsSignals
}

func (s signalledStore) CreateSnapshot(ctx context.Context, snap api.Snapshot) error {
	err := s.Store.CreateSnapshot(ctx, snap)
	if err == nil {
		s.signals.notify(snap.WorkspaceID)
	}
	return err
}

func (s signalledStore) AppendSnapshot(ctx context.Context, snap api.Snapshot) (api.Snapshot, error) {
	written, err := s.Store.AppendSnapshot(ctx, snap)
	if err == nil {
		s.signals.notify(snap.WorkspaceID)
	}
	return written, err
}

func (s signalledStore) TransitionWorkspace(ctx context.Context, id string, ev wsstate.Event, reason, cause string) error {
	err := s.Store.TransitionWorkspace(ctx, id, ev, reason, cause)
	if err == nil {
		s.signals.notify(id)
	}
	return err
}
