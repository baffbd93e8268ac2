package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// Lost workspaces. A sandbox destroyed outside Tether (docker rm -f, a Daytona sandbox deleted
// in its dashboard, a host wiped) takes with it whatever the workspace held beyond its last
// receipt. The controller notices in its upkeep: a ready (or stopped) workspace whose runner is not connected
// and whose provider, asked afresh, says the sandbox is gone becomes lost, with what is known
// lost recorded as an event and its active runs failed. A disconnected runner alone is never a
// loss: runners reconnect, and only the provider's answer decides.
//
// What is known lost: for a stopped workspace, exactly (the stop recorded its tree's digest,
// compared with the last receipt's). For a ready one the controller keeps no digest of a live tree (close --check walks it on
// demand, checkpoints compare at their turn and keep no result beyond a receipt), so at the
// moment of loss it cannot prove the tree still equalled its last receipt: a run, a service or
// a file write may have changed it since anyone last looked. The workspace is therefore always
// lost, never quietly closed; the record names the last receipt, when a checkpoint last looked
// at the tree, and the runs and services that were active (each a writer the receipt may not
// hold). Recovering from that receipt (tether workspace recover) is the decision an operator
// makes and the controller records.

// lostRunReason is the error a run active at a loss ends with; it stays failed for good.
func lostRunReason(allocationID string) string {
	return fmt.Sprintf("lost: the sandbox of allocation %s was destroyed outside Tether while this run was active", allocationID)
}

// detectLost looks at every ready or stopped workspace whose runner is not connected and asks its provider
// whether the sandbox still exists; a gone one is lost (loseWorkspace). Each controller inspects
// the host-local sandboxes it placed itself (only it can reach them); the others are inspected
// by the controller holding the upkeep lock (locked). A sandbox whose host is unreachable is
// not inspected: unknown is not gone.
func (s *Server) detectLost(ctx context.Context, locked bool) {
	ctx, cancel := context.WithTimeout(ctx, lostPassBudget)
	defer cancel()
	s.lostProbes.prune(s.now())
	list, err := s.store.ListWorkspaces(ctx, false)
	if err != nil {
		s.log.Warn("lost check: list workspaces", "err", err)
		return
	}
	for _, ws := range list {
		if ctx.Err() != nil {
			return
		}
		if (ws.State != api.StateReady && ws.State != api.StateStopped) || s.connected(ctx, ws.AllocationID) {
			continue
		}
		a, err := s.store.GetAllocation(ctx, ws.AllocationID)
		if err != nil || !(ws.State == api.StateReady && a.State == store.AllocDisconnected ||
			ws.State == api.StateStopped && a.State == store.AllocStopped) {
			// Starting: the ready deadline decides (failOverdue); connected: another controller
			// holds it; destroyed or failed: already released.
			continue
		}
		local, err := s.hostLocal(ctx, a.Provider)
		if err != nil {
			continue
		}
		mine := a.PlacedOn == s.id || (a.PlacedOn == "" && locked)
		if (local && !mine) || (!local && !locked) {
			continue
		}
		if !s.lostProbes.due(a.ID, s.now()) {
			continue
		}
		st, err := s.inspectBounded(ctx, a)
		if err != nil {
			s.lostProbes.unknown(a.ID, s.now())
			s.log.Warn("lost check: inspect", "workspace", ws.ID, "allocation", a.ID, "err", err)
			continue
		}
		if !s.lostProbes.answer(a.ID, st.State == provider.StateGone, s.now()) {
			continue
		}
		// Asked again after the provider answered: a runner that connected meanwhile means the
		// sandbox is there after all.
		if s.connected(ctx, ws.AllocationID) {
			continue
		}
		if err := s.loseWorkspace(ctx, ws, a, st.Reason); err != nil && protocol.CodeOf(err) != protocol.CodeConflict {
			s.log.Warn("lost check: record the loss", "workspace", ws.ID, "err", err)
		}
	}
}

// Confirming a loss. One "gone" is not enough: a provider's API behind a gateway, a glitch, a
// list that lags can each say so once. A sandbox is taken as gone after lostConfirmations gone
// answers in a row, lostProbeGap apart at least (any other answer, or an error, starts over), and
// each allocation is asked at most once per lostProbeGap, each call bounded by lostInspectTimeout:
// a provider's API is not asked once a second per workspace, nor can a hung call hold the upkeep.
const (
	lostConfirmations  = 3
	lostProbeGap       = 5 * time.Second
	lostInspectTimeout = 15 * time.Second
)

// lostProbes is what this controller's lost checks have seen of each allocation so far.
type lostProbes struct {
	mu sync.Mutex
	m  map[string]lostProbe
}

type lostProbe struct {
	gone int       // gone answers in a row
	last time.Time // the last answer (or error)
	next time.Time // not asked again before
}

// lostRowGap: gone answers further apart than this are not in a row (the allocation was not
// asked meanwhile: its runner came back, its workspace moved on), and confirming starts over.
// Entries older than lostForget are dropped, so the map holds only allocations being asked.
const (
	lostRowGap = 3 * lostProbeGap
	lostForget = 10 * lostProbeGap
	// lostPassBudget bounds one pass of the lost check: a provider whose API hangs holds the
	// upkeep for this long at most, not lostInspectTimeout per workspace; the rest is asked on
	// the next pass.
	lostPassBudget = 30 * time.Second
)

// prune drops what was last answered longer than lostForget ago.
func (p *lostProbes) prune(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, pr := range p.m {
		if now.Sub(pr.last) > lostForget {
			delete(p.m, id)
		}
	}
}

// due reports whether allocation id may be asked now.
func (p *lostProbes) due(id string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !now.Before(p.m[id].next)
}

// unknown records that asking about id failed: an error is not an answer, confirming starts
// over, and id is asked again after the gap.
func (p *lostProbes) unknown(id string, now time.Time) {
	p.answer(id, false, now)
}

// answer records one answer for id and reports whether the sandbox is now confirmed gone (the
// record is then forgotten: the loss is acted on once).
func (p *lostProbes) answer(id string, gone bool, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]lostProbe{}
	}
	if !gone {
		// Asked again only after the gap: a live sandbox of a stopped workspace is not polled
		// once a second.
		p.m[id] = lostProbe{last: now, next: now.Add(lostProbeGap)}
		return false
	}
	pr := p.m[id]
	if pr.gone > 0 && now.Sub(pr.last) > lostRowGap {
		pr.gone = 0
	}
	pr.gone++
	pr.last, pr.next = now, now.Add(lostProbeGap)
	if pr.gone >= lostConfirmations {
		delete(p.m, id)
		return true
	}
	p.m[id] = pr
	return false
}

// inspectBounded is inspectSandbox within lostInspectTimeout.
func (s *Server) inspectBounded(ctx context.Context, a store.Allocation) (provider.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, lostInspectTimeout)
	defer cancel()
	return s.inspectSandbox(ctx, a)
}

// inspectSandbox asks the allocation's provider, here, for its sandbox's state.
func (s *Server) inspectSandbox(ctx context.Context, a store.Allocation) (provider.Status, error) {
	prov, err := s.providerFor(ctx, a.Provider)
	if err != nil {
		return provider.Status{}, err
	}
	return prov.Inspect(ctx, a.ID)
}

// loseWorkspace records ws's loss: the workspace lost (only from ready or stopped: a close, a delete or a
// runner that came back first wins), what is known lost as the transition's cause, its active
// runs failed, its allocation destroyed (its session revoked, whatever the provider left of the
// sandbox removed).
func (s *Server) loseWorkspace(ctx context.Context, ws api.Workspace, a store.Allocation, why string) error {
	ctx = context.WithoutCancel(ctx)
	running, err := s.store.RunningRuns(ctx, a.ID)
	if err != nil {
		return err
	}
	loss, err := s.lossReport(ctx, ws, a, why, running)
	if err != nil {
		return err
	}
	reason := fmt.Sprintf("the sandbox of allocation %s was destroyed outside Tether (%s)", a.ID, firstNonEmpty(why, "provider: gone"))
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.Lose, reason, loss); err != nil {
		return err
	}
	s.log.Warn("workspace lost: its sandbox was destroyed outside Tether", "workspace", ws.ID, "allocation", a.ID, "active_runs", len(running))
	for _, run := range running {
		if err := s.store.FinishRun(ctx, store.RunFinish{ID: run.ID, State: api.RunFailed, Error: lostRunReason(a.ID), At: s.now()}); err != nil {
			s.log.Warn("lost: fail run", "run", run.ID, "err", err)
		}
	}
	// No runner of the gone sandbox is admitted again, and the provider's leftovers (a Docker
	// network) go.
	if err := s.store.UpdateAllocation(ctx, a.ID, store.AllocDestroyed, "", ""); err != nil {
		return err
	}
	s.disconnect(ctx, a.ID)
	// What the provider left (a Docker network) goes, but only while it still says the sandbox
	// is gone: a sandbox that is there after all is never destroyed by a loss.
	if st, err := s.inspectBounded(ctx, a); err != nil || st.State != provider.StateGone {
		_ = s.store.RecordEvent(ctx, ws.ID, "the sandbox of lost allocation "+a.ID+" was not removed: the provider no longer reports it gone")
		_, err = s.store.BumpEpoch(ctx, ws.ID)
		return err
	}
	if err := s.destroySandbox(ctx, a); err != nil {
		_ = s.store.RecordEvent(ctx, ws.ID, "what was left of the sandbox of lost allocation "+a.ID+" was not removed: "+protocol.AsError(err).Message)
	}
	// Every writer of the lost allocation is fenced.
	_, err = s.store.BumpEpoch(ctx, ws.ID)
	return err
}

// lossReport says what is known lost, for the lose event: the last receipt (or none), when a
// checkpoint last looked at the tree, the runs and services that were active.
func (s *Server) lossReport(ctx context.Context, ws api.Workspace, a store.Allocation, why string, running []api.Run) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "lost: the provider reports the sandbox of allocation %s gone", a.ID)
	if why != "" {
		fmt.Fprintf(&b, " (%s)", why)
	}
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		return "", err
	}
	kept := ""
	if ws.State == api.StateStopped && a.State == store.AllocStopped {
		// Only a stopped sandbox's digest says what it held: a running one may hold anything since.
		kept = a.StoppedTree
	}
	switch {
	case kept != "" && last != nil && last.Summary.Tree == kept:
		// A stop recorded the tree it kept: here the loss is known exactly.
		fmt.Fprintf(&b, "; nothing unsaved: the stopped sandbox held tree %s, the tree of receipt %s", short(kept), last.ID)
	case kept != "":
		fmt.Fprintf(&b, "; the stopped sandbox held tree %s, not saved in any receipt (last receipt: %s)", short(kept), firstNonEmpty(receiptID(last), "none"))
	case last == nil:
		b.WriteString("; every change is lost: the workspace has no receipt")
	default:
		fmt.Fprintf(&b, "; unsaved changes since receipt %s (tree %s, taken %s) are lost", last.ID, short(last.Summary.Tree), stamp(last.CreatedAt))
	}
	if ws.LastCheckpointAt != nil {
		fmt.Fprintf(&b, "; a checkpoint last looked at the tree %s", stamp(*ws.LastCheckpointAt))
	}
	fmt.Fprintf(&b, "; runner last seen %s", stamp(a.UpdatedAt))
	if len(running) > 0 {
		ids := make([]string, len(running))
		for i, r := range running {
			ids[i] = r.ID
		}
		fmt.Fprintf(&b, "; active runs failed: %s", strings.Join(ids, ", "))
	}
	if svcs, err := s.store.ListServices(ctx, ws.ID); err == nil {
		var names []string
		for _, svc := range svcs {
			if svc.State == protocol.ServiceReady || svc.State == protocol.ServiceStarting {
				names = append(names, svc.Name)
			}
		}
		if len(names) > 0 {
			fmt.Fprintf(&b, "; services that were running: %s", strings.Join(names, ", "))
		}
	}
	return b.String(), nil
}

// receiptID is the id of a receipt, "" for none.
func receiptID(r *api.Snapshot) string {
	if r == nil {
		return ""
	}
	return r.ID
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// short is the first 12 characters of a digest, for a message.
func short(d string) string {
	if len(d) > 19 && strings.HasPrefix(d, "sha256:") {
		return d[:19]
	}
	return d
}
