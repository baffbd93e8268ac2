package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// The idle policy (issue 22): a ready workspace with no activity (activity.go) for its idle
// duration is stopped (its sandbox retained) or closed (saved and released).

// MinIdleAfter is the shortest idle duration a workspace or the controller may set. Activity is
// flushed to the store every few seconds and the sweep looks every few seconds: a shorter one
// would stop workspaces between two keystrokes, and an agent's token may set its own.
const MinIdleAfter = time.Minute

// idleTick is how often the idle sweep looks for idle workspaces.
const idleTick = 5 * time.Second

// lockIdle is the cluster-wide lock of the idle sweep: one controller at a time decides and
// acts, so a workspace is never stopped or closed twice at once.
const lockIdle = "idle"

// CheckIdle refuses an idle duration shorter than MinIdleAfter.
func CheckIdle(d time.Duration) error {
	if d < MinIdleAfter {
		return protocol.Errorf(protocol.CodeInvalidArgument, "idle duration %s: must be at least %s", d, MinIdleAfter)
	}
	return nil
}

// IdleDefault is the controller's default policy from serve's --idle-stop and --idle-close (at
// most one; nil when neither).
func IdleDefault(stop, close time.Duration) (*api.IdlePolicy, error) {
	return idleChoice(durPtr(stop), durPtr(close), false, false)
}

func durPtr(d time.Duration) *protocol.Duration {
	if d == 0 {
		return nil
	}
	p := protocol.Duration(d)
	return &p
}

// idleChoice turns the idle fields of a request into a policy: stop or close after a duration,
// off, or (def) the controller's default, which is nil like nothing asked. At most one may be
// given; set says whether one was.
func idleChoice(stop, close *protocol.Duration, def, off bool) (*api.IdlePolicy, error) {
	n := 0
	for _, given := range []bool{stop != nil, close != nil, def, off} {
		if given {
			n++
		}
	}
	if n > 1 {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "idle_stop, idle_close, idle_default and idle_off exclude each other")
	}
	switch {
	case stop != nil:
		return &api.IdlePolicy{Action: api.IdleStop, After: *stop}, CheckIdle(time.Duration(*stop))
	case close != nil:
		return &api.IdlePolicy{Action: api.IdleClose, After: *close}, CheckIdle(time.Duration(*close))
	case off:
		return &api.IdlePolicy{Action: api.IdleOff}, nil
	}
	return nil, nil
}

// idlePolicy is the policy in force for ws (nil: none): its own, else the controller's default.
func (s *Server) idlePolicy(ws api.Workspace) *api.IdlePolicy {
	p := ws.IdlePolicy
	if p == nil {
		p = s.cfg.Idle
	}
	if p == nil || p.Action == api.IdleOff || p.After <= 0 {
		return nil
	}
	return p
}

// withIdle fills the policy in force into ws, and the newest activity this controller knows of
// (it may not be flushed yet), for the API.
func (s *Server) withIdle(ws api.Workspace) api.Workspace {
	if p := s.idlePolicy(ws); p != nil {
		cp := *p
		ws.Idle = &cp
	}
	if at, _ := s.activity.latest(ws.ID, s.now()); !at.IsZero() && (ws.LastActivityAt == nil || at.After(*ws.LastActivityAt)) {
		ws.LastActivityAt = &at
	}
	return ws
}

// idleLoop runs the idle sweep every idleTick on the injected clock until ctx (the controller's
// routines') is done.
func (s *Server) idleLoop(ctx context.Context) {
	s.passLoop(ctx, idleTick, s.idlePass, func() {
		if s.idlePassed != nil {
			s.idlePassed()
		}
	})
}

// passLoop runs pass every interval on the injected clock (the next interval counts from the
// end of a pass) until ctx is done. passed runs once the timer is armed, first before any pass:
// a test that heard it may advance the clock.
func (s *Server) passLoop(ctx context.Context, every time.Duration, pass func(context.Context), passed func()) {
	t := s.cfg.Clock.NewTimer(every)
	defer t.Stop()
	passed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		pass(ctx)
		t.Reset(every)
		passed()
	}
}

// idlePass flushes this controller's activity, then, holding the cluster's idle lock, takes the
// idle action of every workspace that is due, each in a routine of its own, and waits for them
// (the lock is held until they are done: no other controller acts on one of them meanwhile).
func (s *Server) idlePass(ctx context.Context) {
	s.flushActivity(ctx)
	release, ok, err := s.store.TryClusterLock(ctx, lockIdle)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("idle sweep: cluster lock", "err", err)
		}
		return
	}
	defer release()
	list, err := s.store.ListWorkspaces(ctx, false)
	if err != nil {
		s.log.Warn("idle sweep: list workspaces", "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, ws := range list {
		if ctx.Err() != nil {
			break
		}
		p, due := s.idleDue(ctx, ws)
		if !due {
			continue
		}
		wg.Add(1)
		if !s.routines.Go("idle "+p.Action+" "+ws.ID, func(ctx context.Context) {
			defer wg.Done()
			s.takeIdle(ctx, ws, *p)
		}) {
			wg.Done()
		}
	}
	wg.Wait()
}

// idleSince is when ws was last active as far as anyone knows: its last flushed activity, this
// controller's own, or its last change of state (a workspace started or reopened is fresh).
func (s *Server) idleSince(ws api.Workspace) (since time.Time, open bool) {
	since = ws.UpdatedAt
	if ws.LastActivityAt != nil && ws.LastActivityAt.After(since) {
		since = *ws.LastActivityAt
	}
	local, open := s.activity.latest(ws.ID, s.now())
	if local.After(since) {
		since = local
	}
	return since, open
}

// idleDue says whether ws's idle action is due now. A run recorded as running is activity all
// the time it runs: it is written down as such (so the idle time counts from its end, not from
// its start), and nothing is due.
func (s *Server) idleDue(ctx context.Context, ws api.Workspace) (*api.IdlePolicy, bool) {
	p := s.idlePolicy(ws)
	if p == nil || ws.State != api.StateReady {
		return nil, false
	}
	now := s.now()
	since, open := s.idleSince(ws)
	if open || now.Before(since.Add(time.Duration(p.After))) || now.Before(s.idleRetry.at(ws.ID)) {
		return nil, false
	}
	running, err := s.store.RunningRuns(ctx, ws.AllocationID)
	if err != nil {
		s.log.Warn("idle sweep: running runs", "workspace", ws.ID, "err", err)
		return nil, false
	}
	// A run counts only while its runner is connected somewhere in the cluster: only the runner
	// ends a run's record, so a runner that died (or one that never reports an end) would
	// otherwise keep its workspace awake for good.
	if len(running) > 0 {
		if a, err := s.store.GetAllocation(ctx, ws.AllocationID); err != nil || a.State != store.AllocConnected {
			running = nil
		}
	}
	if len(running) > 0 {
		if err := s.store.TouchWorkspaces(ctx, map[string]time.Time{ws.ID: now}); err != nil {
			s.log.Warn("idle sweep: record a running run's activity", "workspace", ws.ID, "err", err)
		}
		return nil, false
	}
	return p, true
}

// takeIdle stops or closes ws for being idle. A refusal (a close that cannot save, a run started
// meanwhile, the runner away) is an event; the next try is an idle duration later.
func (s *Server) takeIdle(ctx context.Context, ws api.Workspace, p api.IdlePolicy) {
	after := time.Duration(p.After)
	// Read again just before acting: activity flushed since the pass listed it wins.
	if cur, err := s.store.GetWorkspace(ctx, ws.ID); err != nil {
		return
	} else if q, due := s.idleDue(ctx, cur); !due || q.Action != p.Action {
		return
	} else {
		ws = cur
	}
	s.log.Info("idle policy", "workspace", ws.ID, "action", p.Action, "idle", after)
	if err := s.store.RecordEvent(ctx, ws.ID, fmt.Sprintf("idle %s: no activity for %s", p.Action, after)); err != nil {
		s.log.Warn("idle: record event", "workspace", ws.ID, "err", err)
	}
	var err error
	switch p.Action {
	case api.IdleStop:
		_, err = s.StopWorkspace(ctx, ws.ID)
	case api.IdleClose:
		_, err = s.CloseWorkspace(ctx, ws, false)
	}
	if err == nil || ctx.Err() != nil {
		return
	}
	retry := max(after, MinIdleAfter)
	now := s.now()
	s.idleRetry.set(ws.ID, now, now.Add(retry))
	why := fmt.Sprintf("idle %s refused: %s; next try in %s", p.Action, protocol.AsError(err).Error(), retry)
	s.log.Warn(why, "workspace", ws.ID)
	if err := s.store.RecordEvent(context.WithoutCancel(ctx), ws.ID, why); err != nil {
		s.log.Warn("idle: record event", "workspace", ws.ID, "err", err)
	}
}

// retryTimes is when this controller may next try the idle action of a workspace it refused.
type retryTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (r *retryTimes) at(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

func (r *retryTimes) set(id string, now, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]time.Time{}
	}
	// Passed ones go: the map holds only workspaces whose next try is still ahead.
	for k, v := range r.m {
		if v.Before(now) {
			delete(r.m, k)
		}
	}
	r.m[id] = at
}
