package controller

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/peer"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// evictPath is where a controller gives up a runner it holds whose connection is dead.
func evictPath(allocationID string) string {
	return "/internal/v1/allocations/" + allocationID + "/evict"
}

// errOwnerLive: the allocation's runner is connected to another live controller and answers
// there; the new connection is refused as a second one.
var errOwnerLive = errors.New("the allocation's runner is connected to another controller")

// takeOver clears the way for a runner connecting here whose allocation another controller
// owns (the store says so): when that controller's heartbeat expired, it has let go of its
// runners itself (peer.Timing) and the allocation is taken over; otherwise it is asked to
// probe its connection and give it up if it is dead (the runner's network dropped, and it
// reconnected through the balancer to this controller). A live one keeps the runner:
// errOwnerLive.
func (s *Server) takeOver(ctx context.Context, a store.Allocation) error {
	m, err := s.store.GetMember(ctx, a.Owner)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if !s.members.Alive(m) {
		s.log.Info("taking over a runner from a controller whose heartbeat expired", "allocation", a.ID, "from", m.ID, "heartbeat", m.HeartbeatAt)
		return nil
	}
	// The owner pings its connection for up to probeTimeout; an owner cut off from this one
	// (a partition: no answer, not even a refusal) is given a second more.
	reqCtx, cancel := context.WithTimeout(ctx, probeTimeout+time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, m.Address+evictPath(a.ID), nil)
	if err != nil {
		return err
	}
	s.authorizePeer(req.Header)
	resp, err := s.peerHTTP.Do(req)
	if err != nil {
		// Alive by its heartbeat but unreachable: most often it just died (kill -9, a lost
		// host). Its heartbeat expires within the TTL; the runner's connection waits for that
		// here rather than retrying blind, so it is taken over as soon as it may be.
		if werr := s.awaitExpiry(ctx, m.ID); werr != nil {
			return protocol.Errorf(protocol.CodeUnavailable, "controller %s holds the runner and cannot be asked to give it up: %v", m.ID, err)
		}
		s.log.Info("taking over a runner from a controller that stopped answering and whose heartbeat then expired", "allocation", a.ID, "from", m.ID)
		return nil
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusConflict:
		return errOwnerLive
	}
	return protocol.Errorf(protocol.CodeUnavailable, "controller %s holds the runner and answered %s to giving it up", m.ID, resp.Status)
}

// awaitExpiry waits until the member's heartbeat expired (nil) or, within the TTL, it beat again
// or ctx ended (an error).
func (s *Server) awaitExpiry(ctx context.Context, id string) error {
	timing := s.members.Timing()
	ctx, cancel := context.WithTimeout(ctx, timing.TTL+timing.Interval)
	defer cancel()
	for {
		m, err := s.store.GetMember(ctx, id)
		if protocol.CodeOf(err) == protocol.CodeNotFound || (err == nil && !s.members.Alive(m)) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-s.cfg.Clock.After(timing.Interval / 2):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handleEvict gives up this controller's connection to an allocation's runner if it is dead (it
// does not answer a ping within probeTimeout): another controller has a new connection from the
// runner. A live connection is kept: 409.
func (s *Server) handleEvict(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	release, err := s.hub.Admit(id, probeTimeout)
	if err != nil {
		writeError(w, protocol.Errorf(protocol.CodeConflict, "allocation %s: %v", id, err))
		return
	}
	release()
	if _, err := s.store.ReleaseAllocation(r.Context(), id, s.id); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// disconnectPath is where a controller closes a runner connection it holds on a peer's behalf.
func disconnectPath(allocationID string) string {
	return "/internal/v1/allocations/" + allocationID + "/disconnect"
}

// disconnect closes the runner connection of an allocation wherever it is held: here, or — asked
// over the peer channel — at its owner (a runner over budget through a tunnel is cut off at the
// source, not merely from this controller's tunnel). Best effort: a connection that stays is one
// whose allocation the caller has just revoked or struck, and the store refuses it later anyway.
func (s *Server) disconnect(ctx context.Context, allocationID string) {
	if _, ok := s.hub.Get(allocationID); ok {
		s.hub.Disconnect(allocationID)
		return
	}
	a, err := s.store.GetAllocation(ctx, allocationID)
	if err != nil || a.Owner == "" || a.Owner == s.id {
		return
	}
	m, err := s.store.GetMember(ctx, a.Owner)
	if err != nil || !s.members.Alive(m) {
		return
	}
	if err := s.peerCall(ctx, m, http.MethodPost, disconnectPath(allocationID)); err != nil {
		s.log.Warn("ask the owner to disconnect a runner", "allocation", allocationID, "owner", m.ID, "err", err)
	}
}

// handleDisconnect closes a runner connection this controller holds, for a peer.
func (s *Server) handleDisconnect(w http.ResponseWriter, r *http.Request) {
	s.hub.Disconnect(r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

// handleTunnel serves a peer's tunnel to a runner this controller holds.
func (s *Server) handleTunnel(w http.ResponseWriter, r *http.Request) {
	c, ok := s.hub.Get(r.PathValue("id"))
	if !ok {
		writeError(w, protocol.Errorf(protocol.CodeUnavailable, "controller %s does not hold the runner of allocation %s (any more)", s.id, r.PathValue("id")))
		return
	}
	peer.Serve(w, r, c, s.log)
}

// dropRunners closes every runner connection this controller holds: it could not write its
// heartbeat for the lapse, so peers will soon consider it dead and let the runners' reconnects
// make them owners. It lets go first.
func (s *Server) dropRunners() {
	s.tunnels.closeAll()
	s.hub.CloseAll()
}

// waitRunner waits until an allocation's runner is connected to any controller of the cluster
// and reachable from this one: the hello may land here (the hub wakes the wait) or on a peer
// (the store's allocation watch does, and a poll covers a lost notification).
func (s *Server) waitRunner(ctx context.Context, allocationID string) (*hub.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	local := make(chan *hub.Conn, 1)
	go func() {
		if c, err := s.hub.Wait(ctx, allocationID); err == nil {
			local <- c
		}
	}()
	changed, err := s.store.WatchAllocations(ctx)
	if err != nil {
		return nil, err
	}
	poll := s.cfg.Clock.NewTicker(waitRunnerPoll)
	defer poll.Stop()
	for {
		a, err := s.store.GetAllocation(ctx, allocationID)
		if err != nil {
			return nil, err
		}
		if a.State == store.AllocConnected && a.Owner != "" && a.Owner != s.id {
			if c, err := s.reach(ctx, allocationID); err == nil {
				return c, nil
			}
		}
		select {
		case c := <-local:
			return c, nil
		case _, ok := <-changed:
			if !ok {
				changed = nil // the store closed: the poll goes on alone
			}
		case <-poll.Chan():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waitRunnerPoll is how often waitRunner re-reads the allocation when no notification came.
const waitRunnerPoll = time.Second

// ownAllocation records that this controller holds the allocation's runner.
func (s *Server) ownAllocation(ctx context.Context, c *hub.Conn) error {
	return s.store.ClaimAllocation(ctx, c.AllocationID, s.id, c.Hello.Root, c.Hello.RunnerVersion)
}

// disownAllocation records that the runner's connection here ended, unless another controller
// claimed the allocation meanwhile.
func (s *Server) disownAllocation(allocationID string) {
	if _, live := s.hub.Get(allocationID); live {
		return
	}
	if _, err := s.store.ReleaseAllocation(context.Background(), allocationID, s.id); err != nil {
		s.log.Warn("record runner disconnection", "allocation", allocationID, "err", err)
	}
}
