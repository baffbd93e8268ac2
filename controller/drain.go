package controller

import (
	"context"
	"net/http"
	"time"
)

// drainWait bounds the graceful part of a shutdown: how long a stopping controller waits for
// the work in flight on it to end before it cuts what is left.
const drainWait = 5 * time.Second

// drainPoll is how often drain looks at the streams still open.
const drainPoll = 10 * time.Millisecond

// drainQuiet is how long a stopping controller must have seen no request and no stream before it
// closes its runner connections: longer than a peer takes from reading the store to opening a
// stream.
const drainQuiet = 250 * time.Millisecond

// drain is the graceful part of a shutdown (Serve's context ended: SIGTERM), before the
// routines are stopped. Stopping at once cut every request the controller was serving (their
// context is the controller's) and every operation on the runners it holds, its own and those
// peers send through tunnels: a rolling restart failed execs and reads in flight. So, for at
// most drainWait:
//
//   - the API server stops taking connections (the balancer's health check sees it down) and
//     closes its idle ones;
//   - the runners held here are disowned in the store: peers stop sending them new operations
//     (reach finds them disconnected, and clients retry unavailable), and when the runners
//     reconnect through the balancer, the controller each lands on admits it at once instead of
//     waiting out this one's heartbeat (a disowned allocation names no owner);
//   - it waits until the requests it is serving ended (the HTTP server's Shutdown tracks none
//     that were hijacked, such as exec: they are counted) and no stream is open on a runner
//     connection or on a tunnel to a peer's runner (operations in flight, peers' included).
//
// The runners' connections are then closed by stopRoutines, and they reconnect elsewhere.
func (s *Server) drain(api *http.Server) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), drainWait)
	defer cancel()
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		_ = api.Shutdown(ctx)
	}()
	defer func() { <-shut }()
	// An idle proxied connection is a stream on a runner: it would hold the wait below.
	s.closeIdleProxies()
	if ids, err := s.store.DisownAllocations(ctx, s.id); err != nil {
		// Peers then take the runners over once this controller's heartbeat expires.
		s.log.Warn("shutdown: disown the runners held here", "err", err)
	} else if len(ids) > 0 {
		s.log.Info("shutdown: runners held here disowned; they reconnect to other controllers", "allocations", len(ids))
	}
	// Once Shutdown returned no request can start any more (the listener and every connection
	// not hijacked are closed), so the count can only fall.
	busy := func() (requests int64, streams int) {
		select {
		case <-shut:
		default:
			return -1, -1
		}
		return s.requests.Load(), s.hub.Streams() + s.tunnels.streams()
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	// Idle must hold for drainQuiet, not just once: a peer that read the store just before the
	// disown still routes an operation here, and opens its stream a moment later; an instant of
	// no streams would let the runner connections close under it (a rolling restart lost such
	// an exec in CI).
	var idleSince time.Time
	for {
		requests, streams := busy()
		switch {
		case requests != 0 || streams != 0:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) >= drainQuiet:
			s.log.Info("shutdown: drained", "took", time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			s.log.Warn("shutdown: work still in flight is cut", "requests", requests, "streams", streams, "waited", drainWait)
			return
		}
	}
}

// counted counts the requests h serves while it serves them, for drain.
func (s *Server) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		defer s.requests.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// streams counts the streams open on every tunnel.
func (t *tunnelCache) streams() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, tn := range t.m {
		n += tn.conn.Streams()
	}
	return n
}
