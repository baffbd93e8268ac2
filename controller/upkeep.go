package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// Cluster-wide locks: work that one controller at a time does for all.
const (
	lockUpkeep = "upkeep"     // disowning dead peers' runners, enforcing ready deadlines, finding lost sandboxes
	lockSweep  = "blob-sweep" // the startup sweep of blobs without receipts
	lockGC     = "gc"         // gc sweeps
)

// readyGrace is how long past an allocation's ready deadline the cluster waits before it fails
// it for the controller that provisioned it: that controller, while alive, does it itself.
const readyGrace = 5 * time.Second

// upkeep does the cluster's periodic work under lockUpkeep, every heartbeat interval, until ctx
// ends.
func (s *Server) upkeep(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(2 * s.members.Timing().Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if err := s.upkeepOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cluster upkeep", "err", err)
		}
	}
}

func (s *Server) upkeepOnce(ctx context.Context) error {
	release, ok, err := s.store.TryClusterLock(ctx, lockUpkeep)
	if err != nil {
		return err
	}
	if !ok {
		// The host-local sandboxes this controller placed are its own to inspect, lock or not.
		s.detectLost(ctx, false)
		return nil
	}
	defer release()
	if err := s.disownDeadPeers(ctx); err != nil {
		return err
	}
	// Expired upload sessions are removed here too, not only by gc (which runs only when
	// asked or with --gc-interval): their staged bytes take the sandbox's disk.
	if _, err := s.expireUploads(ctx); err != nil {
		s.log.Warn("expire upload sessions", "err", err)
	}
	if err := s.failOverdue(ctx); err != nil {
		return err
	}
	s.settleStops(ctx)
	s.detectLost(ctx, true)
	return nil
}

// disownDeadPeers marks disconnected the runners held by controllers whose heartbeat expired:
// they let go of them at their lapse, and until the runners reconnect nobody holds them.
func (s *Server) disownDeadPeers(ctx context.Context) error {
	members, err := s.store.ListMembers(ctx)
	if err != nil {
		return err
	}
	for _, m := range members {
		if s.members.Alive(m) {
			continue
		}
		ids, err := s.store.DisownAllocations(ctx, m.ID)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			s.log.Info("runners of a controller whose heartbeat expired are disconnected until they reconnect", "controller", m.ID, "heartbeat", m.HeartbeatAt, "allocations", len(ids))
		}
	}
	return nil
}

// provisioning is the set of allocations this controller's routines are starting: their ready
// deadline is theirs to enforce.
type provisioning struct {
	mu sync.Mutex
	m  map[string]bool
}

func (p *provisioning) begin(id string) (end func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]bool{}
	}
	p.m[id] = true
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.m, id)
	}
}

func (p *provisioning) has(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}

// failOverdue fails allocations whose runner did not connect by their ready deadline when the
// controller that was starting them is gone (or restarted, and no longer starting them): their
// workspace leaves provisioning (failed) or reopening (closed again), and the runner, should it
// still connect, is refused (a failed allocation admits nobody). A start's allocation is stopped
// again instead, its workspace too (fail-start): its sandbox holds work worth keeping.
func (s *Server) failOverdue(ctx context.Context) error {
	overdue, err := s.store.OverdueAllocations(ctx, s.now().Add(-readyGrace))
	if err != nil {
		return err
	}
	for _, a := range overdue {
		if a.PlacedOn == s.id && s.provisioning.has(a.ID) {
			continue
		}
		if a.PlacedOn != s.id {
			if m, err := s.store.GetMember(ctx, a.PlacedOn); err == nil && s.members.Alive(m) {
				continue
			}
		}
		if err := s.failAllocation(ctx, a); err != nil {
			s.log.Warn("fail overdue allocation", "allocation", a.ID, "err", err)
		}
	}
	return nil
}

func (s *Server) failAllocation(ctx context.Context, a store.Allocation) error {
	reason := fmt.Sprintf("the runner did not connect by %s, and controller %s that was starting it is gone", a.ReadyBy.Format(time.RFC3339), a.PlacedOn)
	ws, err := s.store.GetWorkspace(ctx, a.WorkspaceID)
	if err != nil {
		return err
	}
	if ws.AllocationID == a.ID && ws.State == api.StateStarting {
		// A kept sandbox is not given up for a start that did not finish: it is stopped again,
		// and so is the workspace, with the reason; a later start tries again.
		s.log.Warn("start failed: ready deadline passed", "allocation", a.ID, "workspace", a.WorkspaceID, "placed_on", a.PlacedOn)
		s.failStart(ctx, ws.ID, a, reason)
		return nil
	}
	if err := s.store.UpdateAllocation(ctx, a.ID, store.AllocFailed, "", ""); err != nil {
		return err
	}
	s.log.Warn("allocation failed: ready deadline passed", "allocation", a.ID, "workspace", a.WorkspaceID, "placed_on", a.PlacedOn)
	if ws.AllocationID == a.ID {
		switch ws.State {
		case api.StateProvisioning:
			err = s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FailProvision, reason, "ready deadline passed")
		case api.StateReopening:
			err = s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FailReopen, reason, "ready deadline passed")
		case api.StateRecovering:
			// A recover rebuilds as a reopen does: its new allocation overdue, the workspace is lost
			// again and a later recover tries again.
			err = s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FailRecover, reason, "ready deadline passed")
		}
		if err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
			return err
		}
	}
	if err := s.stopSandbox(ctx, a); err != nil {
		_ = s.store.RecordEvent(ctx, a.WorkspaceID, "the sandbox of failed allocation "+a.ID+" was not stopped: "+protocol.AsError(err).Message)
	}
	return nil
}

// clusterLockPoll is how often clusterLock tries a lock another controller holds.
const clusterLockPoll = 50 * time.Millisecond

// clusterLock waits until it holds the cluster-wide lock called name (another controller may be
// running the same sweep), or ctx ends.
func (s *Server) clusterLock(ctx context.Context, name string) (release func(), err error) {
	for {
		release, ok, err := s.store.TryClusterLock(ctx, name)
		if err != nil || ok {
			return release, err
		}
		select {
		case <-s.cfg.Clock.After(clusterLockPoll):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readyBy is the ready deadline of an allocation created at now.
func (s *Server) readyBy(now time.Time) time.Time { return now.Add(s.cfg.ReadyTimeout) }
