package controller

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// Activity is what keeps a workspace from its idle policy (idle.go): runs (all the time they
// run, read from the store by the sweep), service connections (proxy, connect, port-forward and
// preview traffic: an open connection counts while it is open) and file operations (the files
// API, uploads, tree import and export, a watch's start and end). Reading a workspace's record,
// listing its runs, services or events, and the console's polling are not activity.
//
// Each controller counts its own in memory and writes it to the store (TouchWorkspaces, which
// only moves a workspace's last activity forward) at most every activityFlushEvery per
// workspace: the first use after a quiet spell is written at once, so a sweep on another
// controller sees it; what follows is written by the flush loop, an open connection as "now".

// activityFlushEvery bounds how often one workspace's activity is written to the store, and so
// how stale another controller's view of an open connection may be.
const activityFlushEvery = 2 * time.Second

// HeaderWake asks that a stopped or closed workspace be started or reopened before the call
// (tether … --wake). The controller's --wake-on-use does so for every call.
const HeaderWake = "X-Tether-Wake"

// activityTracker is this controller's activity by workspace, until it is flushed.
type activityTracker struct {
	mu sync.Mutex
	m  map[string]*wsActivity
}

type wsActivity struct {
	open    int       // requests and connections of the workspace open here now
	last    time.Time // the latest activity seen here
	flushed time.Time // the activity time last written to the store
	wrote   time.Time // when it was written (the clock's time)
}

func (a *activityTracker) entry(id string) *wsActivity {
	if a.m == nil {
		a.m = map[string]*wsActivity{}
	}
	e := a.m[id]
	if e == nil {
		e = &wsActivity{}
		a.m[id] = e
	}
	return e
}

// begin counts an activity of id starting at now; write says it should be written at once (the
// store has heard nothing from this controller for a flush interval).
func (a *activityTracker) begin(id string, now time.Time) (write bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entry(id)
	e.open++
	e.last = later(e.last, now)
	return now.Sub(e.wrote) >= activityFlushEvery
}

// end counts the end, at now, of an activity begin counted.
func (a *activityTracker) end(id string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entry(id)
	e.open--
	e.last = later(e.last, now)
}

// touch is an activity of an instant (a run that ended).
func (a *activityTracker) touch(id string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entry(id)
	e.last = later(e.last, now)
}

// latest is id's newest activity here (now while something is open) and whether something is.
func (a *activityTracker) latest(id string, now time.Time) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.m[id]
	if e == nil {
		return time.Time{}, false
	}
	if e.open > 0 {
		return now, true
	}
	return e.last, false
}

// due is what to write at now: each workspace's newest activity (now while open) not written
// yet, unless it was written less than a flush interval ago; all of it when force.
func (a *activityTracker) due(now time.Time, force bool) map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]time.Time{}
	for id, e := range a.m {
		at := e.last
		if e.open > 0 {
			at = now
		}
		if at.After(e.flushed) && (force || now.Sub(e.wrote) >= activityFlushEvery) {
			out[id] = at
		}
	}
	return out
}

// written records that at was written at now, and forgets workspaces with nothing open and
// nothing newer to write, so the map holds only recent activity.
func (a *activityTracker) written(at map[string]time.Time, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, t := range at {
		if e := a.m[id]; e != nil {
			e.flushed, e.wrote = later(e.flushed, t), now
		}
	}
	for id, e := range a.m {
		if e.open <= 0 && !e.last.After(e.flushed) {
			delete(a.m, id)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// flushActivity writes this controller's activity that is due to the store.
func (s *Server) flushActivity(ctx context.Context) {
	s.writeActivity(ctx, s.activity.due(s.now(), false))
}

func (s *Server) writeActivity(ctx context.Context, at map[string]time.Time) {
	if len(at) == 0 {
		return
	}
	if err := s.store.TouchWorkspaces(ctx, at); err != nil {
		// Kept: the next flush tries again.
		s.log.Warn("record workspace activity", "workspaces", len(at), "err", err)
		return
	}
	s.activity.written(at, s.now())
}

// activityLoop flushes activity every activityFlushEvery until ctx ends, and once more then.
func (s *Server) activityLoop(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(activityFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			s.writeActivity(wctx, s.activity.due(s.now(), true))
			cancel()
			return
		case <-t.Chan():
		}
		s.flushActivity(ctx)
	}
}

// beginActivity counts an activity of workspace id until the returned end is called; the first
// after a quiet spell is written to the store before the call goes on.
func (s *Server) beginActivity(ctx context.Context, id string) (end func()) {
	now := s.now()
	if s.activity.begin(id, now) {
		s.writeActivity(ctx, map[string]time.Time{id: now})
	}
	return func() { s.activity.end(id, s.now()) }
}

// A useKind says how a route uses a workspace.
type useKind int

const (
	// useWork is activity while the request is open; on a stopped or closed workspace it is
	// refused with the next step, or wakes the workspace when asked.
	useWork useKind = iota + 1
	// useWatch is useWork whose start and end are activity, not its whole length: a watch left
	// open is nobody at work.
	useWatch
	// useRead is a file read: activity; a stopped or closed workspace is read from its saved
	// copy as before, unless waking is asked.
	useRead
	// usePeek refuses or wakes like useWork but is not activity (a service's logs, endpoint).
	usePeek
)

// useRoutes are the routes that use a workspace, by pattern (routes wraps them in inUse; the
// API spec documents HeaderWake on them).
var useRoutes = map[string]useKind{
	"GET /v1/workspaces/{id}/exec":                        useWork,
	"PUT /v1/workspaces/{id}/tree":                        useWork,
	"GET /v1/workspaces/{id}/tree":                        useWork,
	"GET /v1/workspaces/{id}/watch":                       useWatch,
	"POST /v1/workspaces/{id}/uploads":                    useWork,
	"PUT /v1/workspaces/{id}/uploads/{upload}":            useWork,
	"DELETE /v1/workspaces/{id}/uploads/{upload}":         useWork,
	"GET " + filesPattern:                                 useRead,
	"PUT " + filesPattern:                                 useWork,
	"DELETE " + filesPattern:                              useWork,
	"POST " + filesPattern:                                useWork,
	"POST /v1/workspaces/{id}/services":                   useWork,
	"POST /v1/workspaces/{id}/services/{name}/stop":       useWork,
	"GET /v1/workspaces/{id}/services/{name}/connect":     useWork,
	"GET /v1/workspaces/{id}/ports/{port}/connect":        useWork,
	"/v1/workspaces/{id}/services/{name}/proxy/{path...}": useWork,
	"/v1/workspaces/{id}/services/{name}/proxy":           useWork,
	"GET /v1/workspaces/{id}/services/{name}/logs":        usePeek,
	"GET /v1/workspaces/{id}/services/{name}/endpoint":    usePeek,
}

// filesPattern is the files API's path.
const filesPattern = "/v1/workspaces/{id}/files/{path...}"

// wakeAsked reads HeaderWake: absent is false, anything but a boolean is invalid_argument.
func wakeAsked(r *http.Request) (bool, error) {
	v := r.Header.Get(HeaderWake)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, protocol.Errorf(protocol.CodeInvalidArgument, "%s %q: want true or false", HeaderWake, v)
	}
	return b, nil
}

// inUse wraps a route that uses a workspace: a stopped or closed workspace is woken (asked, or
// the controller's --wake-on-use) or refused with what to do, and the call counts as activity.
// What the handler refuses itself (an unknown workspace, a bad path) it still answers.
func (s *Server) inUse(kind useKind, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		asked, err := wakeAsked(r)
		if err != nil {
			writeError(w, err)
			return
		}
		ws, err := s.workspaceRecord(r.Context(), r.PathValue("id"))
		if err != nil {
			next(w, r)
			return
		}
		wake := asked || s.cfg.WakeOnUse
		switch ws.State {
		case api.StateStopped, api.StateClosed, api.StateReclaiming:
			if kind == useRead && !asked {
				break // the saved copy, as for any read of a closed workspace
			}
			if !wake {
				writeError(w, asleep(ws))
				return
			}
			if _, err := s.wake(r.Context(), ws); err != nil {
				writeError(w, err)
				return
			}
		case api.StateStopping, api.StateStarting, api.StateClosing, api.StateReopening:
			if wake {
				// The client retries unavailable; by then the change is done and a stopped
				// or closed workspace is woken.
				writeError(w, protocol.Errorf(protocol.CodeUnavailable, "workspace %s is %s; it is woken once that is done", ws.ID, ws.State))
				return
			}
		}
		switch kind {
		case usePeek:
		case useWatch:
			s.beginActivity(r.Context(), ws.ID)()
			defer func() { s.beginActivity(context.WithoutCancel(r.Context()), ws.ID)() }()
		default:
			defer s.beginActivity(r.Context(), ws.ID)()
		}
		next(w, r)
	}
}

// asleep refuses a call on a stopped or closed workspace, saying how to wake it.
func asleep(ws api.Workspace) error {
	if ws.State == api.StateStopped {
		return protocol.Errorf(protocol.CodeConflict, "workspace %s is stopped; start it with \"tether workspace start %s\", or pass --wake to start it on use", ws.ID, ws.ID)
	}
	return protocol.Errorf(protocol.CodeConflict, "workspace %s is %s; reopen it with \"tether workspace reopen %s\", or pass --wake to reopen it on use", ws.ID, ws.State, ws.ID)
}

// wakes lets one wake of a workspace run at a time on this controller: calls arriving meanwhile
// wait for it and share its outcome.
type wakes struct {
	mu sync.Mutex
	m  map[string]*wakeCall
}

type wakeCall struct {
	done chan struct{}
	ws   api.Workspace
	err  error
}

// wake starts a stopped workspace or reopens a closed one, recording why. The wake is not the
// caller's to cancel: once begun it finishes (a client that gives up leaves a woken workspace).
// The caller's right to the workspace was checked; the wake runs as the controller's own work.
func (s *Server) wake(ctx context.Context, ws api.Workspace) (api.Workspace, error) {
	s.wakes.mu.Lock()
	if s.wakes.m == nil {
		s.wakes.m = map[string]*wakeCall{}
	}
	c := s.wakes.m[ws.ID]
	if c == nil {
		c = &wakeCall{done: make(chan struct{})}
		s.wakes.m[ws.ID] = c
		id := ws.ID
		finish := func(woken api.Workspace, err error) {
			s.wakes.mu.Lock()
			delete(s.wakes.m, id)
			s.wakes.mu.Unlock()
			c.ws, c.err = woken, err
			close(c.done)
		}
		// The wake is the controller's work, not the request's: it ends with the controller.
		if !s.routines.Go("wake "+ws.ID, func(ctx context.Context) { finish(s.wakeOnce(ctx, ws)) }) {
			finish(ws, protocol.Errorf(protocol.CodeUnavailable, "the controller is shutting down"))
		}
	}
	s.wakes.mu.Unlock()
	select {
	case <-c.done:
		return c.ws, c.err
	case <-ctx.Done():
		return ws, ctx.Err()
	}
}

func (s *Server) wakeOnce(ctx context.Context, ws api.Workspace) (api.Workspace, error) {
	var woken api.Workspace
	var err error
	if ws.State == api.StateStopped {
		_ = s.store.RecordEvent(ctx, ws.ID, "wake: starting the stopped workspace for a call")
		woken, err = s.StartWorkspace(ctx, ws.ID)
	} else {
		_ = s.store.RecordEvent(ctx, ws.ID, "wake: reopening the "+string(ws.State)+" workspace for a call")
		woken, err = s.ReopenWorkspace(ctx, ws.ID, api.ReopenRequest{})
	}
	if protocol.CodeOf(err) != protocol.CodeConflict {
		return woken, err
	}
	// Another controller's wake (or a start or reopen by hand) got there first: ready is what
	// was asked for; still on its way, the caller retries.
	cur, gerr := s.store.GetWorkspace(ctx, ws.ID)
	switch {
	case gerr != nil:
		return woken, err
	case cur.State == api.StateReady:
		return cur, nil
	case cur.State == api.StateStarting || cur.State == api.StateReopening:
		return cur, protocol.Errorf(protocol.CodeUnavailable, "workspace %s is %s; it is being woken", cur.ID, cur.State)
	}
	return woken, err
}
