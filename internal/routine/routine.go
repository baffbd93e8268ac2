// Package routine runs a component's background goroutines under names, so that stopping the
// component stops and waits for every one of them, a panic names the routine it came from, and a
// leak is a name in a list rather than an anonymous stack.
//
// A Group is the only way Tether's long-lived components (the controller's server, a runner
// connection, an exec bridge) start goroutines: each says at its start what it is and how it
// ends — with the group's context (Go), or on its own once its work is done (the context is
// then only advice).
package routine

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
)

// Group is a set of named goroutines sharing one context. The zero value is not usable; make
// one with New.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger

	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]int
	stopped bool
}

// New returns a group whose routines see a context derived from parent, canceled by Stop.
// log receives panics (nil: slog.Default()).
func New(parent context.Context, log *slog.Logger) *Group {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(parent)
	return &Group{ctx: ctx, cancel: cancel, log: log, running: map[string]int{}}
}

// Context is the group's context: done once Stop is called or the parent is done.
func (g *Group) Context() context.Context { return g.ctx }

// Go starts fn as the routine name. fn must return once ctx is done. It reports false, and
// does not start fn, once the group is stopping: a component shutting down takes no new work.
// A panic in fn is logged with the routine's name and stack and then re-raised: a routine's
// bug must not be survived silently.
func (g *Group) Go(name string, fn func(ctx context.Context)) bool {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return false
	}
	g.running[name]++
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.done(name)
		defer func() {
			if p := recover(); p != nil {
				g.log.Error("routine panicked", "routine", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				panic(p)
			}
		}()
		fn(g.ctx)
	}()
	return true
}

func (g *Group) done(name string) {
	g.mu.Lock()
	if g.running[name]--; g.running[name] == 0 {
		delete(g.running, name)
	}
	g.mu.Unlock()
	g.wg.Done()
}

// Running names the routines still running (with a count when several share a name), sorted:
// what a stuck shutdown is waiting for.
func (g *Group) Running() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.running))
	for name, n := range g.running {
		if n > 1 {
			name = fmt.Sprintf("%s ×%d", name, n)
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Stop cancels the group's context, refuses new routines and waits for the running ones.
func (g *Group) Stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// StopContext is Stop bounded by ctx: when ctx ends first it returns an error naming the
// routines still running (they go on; the caller decides whether that is fatal).
func (g *Group) StopContext(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.Stop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("routines still running: %v: %w", g.Running(), ctx.Err())
	}
}
