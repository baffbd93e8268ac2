package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// A gc sweep applies the controller's default retention policy (if any) to every workspace, and
// deletes the snapshot objects no live receipt needs (storage.go). What it reclaims of a closed
// project workspace is storage its work no longer needs:
// the objects of superseded receipts (every receipt holds the whole tree, Git directory
// included, so the newest holds the work), and a base clone no open workspace uses any more. A sweep deletes nothing unless the
// newest receipt verifies, and never the newest receipt: reopen restores from it. Workspaces
// that are not checkouts of a project keep all their snapshots (they are the user's history).

func (s *Server) handleGC(w http.ResponseWriter, r *http.Request) {
	var req api.GCRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	grace := defaultGCGrace
	if req.Grace != nil {
		grace = time.Duration(*req.Grace)
	}
	if grace < 0 {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "grace must not be negative"))
		return
	}
	res, err := s.GC(r.Context(), grace, req.DryRun)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// defaultGCGrace is the grace of a sweep that names none.
const defaultGCGrace = 24 * time.Hour

// GC sweeps closed workspaces older than grace: it lists each with whether its work is
// reconstructable (its newest receipt verifies) and what reclaiming
// would free, and unless dryRun reclaims those that may be. One sweep runs at a time; a reclaim
// an earlier sweep left half done (a crash) is finished first.
func (s *Server) GC(ctx context.Context, grace time.Duration, dryRun bool) (api.GCResult, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	res := api.GCResult{DryRun: dryRun, Candidates: []api.GCCandidate{}}
	release, err := s.clusterLock(ctx, lockGC)
	if err != nil {
		return res, err
	}
	defer release()
	if !dryRun {
		// Expired upload sessions go first: they are not snapshots, and a failure to reach
		// one's runner must not hold up the sweep (it drops the bytes itself past the expiry).
		n, err := s.expireUploads(ctx)
		res.ExpiredUploads = n
		if err != nil {
			s.log.Warn("gc: expire upload sessions", "err", err)
		}
	}
	list, err := s.store.ListWorkspaces(ctx, false)
	if err != nil {
		return res, err
	}
	now := s.cfg.Clock.Now()
	projects := map[string]bool{}
	swept := map[string]bool{} // closed past the grace when the sweep began

	for _, ws := range list {
		if ws.Git != nil {
			projects[ws.Git.ProjectID] = true
		}
		if ws.State == api.StateReclaiming && !dryRun {
			// A sweep stopped here; reclaim checks its newest receipt again.
			n, err := s.reclaim(ctx, ws, "")
			var back *handedBack
			if errors.As(err, &back) {
				res.Candidates = append(res.Candidates, api.GCCandidate{WorkspaceID: ws.ID, Name: ws.Name, Why: back.why})
				continue
			}
			if err != nil {
				return res, fmt.Errorf("finish the reclaim of %s: %w", ws.ID, err)
			}
			res.Bytes += n
			res.Candidates = append(res.Candidates, api.GCCandidate{WorkspaceID: ws.ID, Name: ws.Name, Reclaimable: true,
				Why: "finished a reclaim an earlier sweep left", Bytes: n, Reclaimed: true})
			continue
		}
		if ws.State != api.StateClosed || ws.Git == nil || now.Sub(ws.UpdatedAt) < grace {
			continue
		}
		swept[ws.ID] = true
		cand, verified := s.gcCandidate(ctx, ws)
		if cand.Reclaimable && !dryRun && cand.Bytes > 0 {
			if err := s.gcFault("candidate checked"); err != nil {
				return res, err
			}
			if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartReclaim, "", "gc: reclaim"); err != nil {
				if protocol.CodeOf(err) == protocol.CodeConflict {
					cand.Reclaimable, cand.Why = false, "a reopen got there first"
					res.Candidates = append(res.Candidates, cand)
					continue
				}
				return res, err
			}
			n, err := s.reclaim(ctx, ws, verified)
			var back *handedBack
			if errors.As(err, &back) {
				cand.Reclaimable, cand.Why = false, back.why
				res.Candidates = append(res.Candidates, cand)
				continue
			}
			if err != nil {
				return res, fmt.Errorf("reclaim %s: %w", ws.ID, err)
			}
			cand.Bytes, cand.Reclaimed = n, true
			res.Bytes += n
		}
		res.Candidates = append(res.Candidates, cand)
	}
	for id := range projects {
		cand, err := s.projects.GCBaseClone(ctx, id, now.Add(-grace), swept, dryRun)
		if err != nil {
			return res, err
		}
		if cand != nil {
			res.Candidates = append(res.Candidates, *cand)
			if cand.Reclaimed {
				res.Bytes += cand.Bytes
			}
		}
	}
	if !s.cfg.Retention.Empty() {
		for _, ws := range list {
			pr, err := s.prune(ctx, ws.ID, s.cfg.Retention, dryRun)
			if errors.Is(err, errNewestUnverified) {
				// One damaged (or now unreadable) workspace does not stop the sweep of the others.
				s.log.Warn("retention policy not applied", "workspace", ws.ID, "err", err)
				s.recordEvent(ctx, ws.ID, "retention policy not applied: "+protocol.AsError(err).Message)
				continue
			}
			if err != nil {
				return res, fmt.Errorf("apply the retention policy to %s: %w", ws.ID, err)
			}
			if len(pr.Removed) > 0 {
				res.Pruned = append(res.Pruned, pr)
			}
		}
	}
	// Last, so that it frees what the reclaims and the policy left unneeded.
	fig, err := s.sweepObjects(ctx, grace, dryRun)
	res.Objects = fig
	res.Bytes += fig.Bytes
	return res, err
}

// gcCandidate decides whether a closed workspace may be reclaimed, and what that frees.
// Closing captured and verified the tree after its last change and released the sandbox, so a
// closed workspace has no pending changes; what is checked here is what could have changed since.
func (s *Server) gcCandidate(ctx context.Context, ws api.Workspace) (cand api.GCCandidate, verified string) {
	cand = api.GCCandidate{WorkspaceID: ws.ID, Name: ws.Name}
	keep := func(why string) (api.GCCandidate, string) { cand.Why = why; return cand, "" }
	if running, err := s.store.RunningRuns(ctx, ws.AllocationID); err != nil || len(running) > 0 {
		return keep(fmt.Sprintf("%d run(s) still recorded as running", len(running)))
	}
	if _, held, err := s.store.CurrentLease(ctx, ws.ID); err != nil || held {
		return keep("a writer lease is held")
	}
	snaps, err := s.store.ListSnapshots(ctx, ws.ID)
	if err != nil {
		return keep("cannot list receipts: " + err.Error())
	}
	if len(snaps) == 0 {
		return keep("no receipt holds its work")
	}
	last := snaps[len(snaps)-1]
	bytes, err := s.supersededBytes(ctx, ws.ID, ws.SourceBase, snaps)
	if err != nil {
		return keep("cannot size its superseded receipts: " + err.Error())
	}
	if bytes == 0 {
		return keep("nothing to reclaim: its newest receipt " + last.ID + " is what reopen restores")
	}
	// Delivery by ancestry is not enough to delete anything here: the receipts also hold
	// uncommitted and ignored files, and reopen restores from the newest. So the newest must
	// verify, whatever the source says.
	if _, err := s.verifySnapshot(ctx, last); err != nil {
		return keep(fmt.Sprintf("its newest receipt %s does not verify (%s)", last.ID, protocol.AsError(err).Message))
	}
	cand.Reclaimable, cand.Bytes = true, bytes
	cand.Why = "every byte is in its newest receipt " + last.ID + ", verified"
	return cand, last.ID
}

// supersededBytes is what reclaiming the workspace's superseded receipts would free: their
// objects (archives and resolved manifests) that neither its newest receipt (an incremental
// one reads earlier layers), nor its source base, nor another workspace's receipt needs.
func (s *Server) supersededBytes(ctx context.Context, wsID, sourceBase string, snaps []api.Snapshot) (int64, error) {
	keep := map[string]bool{}
	for _, k := range receiptKeys(snaps[len(snaps)-1]) {
		keep[k] = true
	}
	for _, snap := range snaps {
		if snap.ID == sourceBase {
			for _, k := range receiptKeys(snap) {
				keep[k] = true
			}
		}
	}
	users, err := s.store.SnapshotObjectUsers(ctx)
	if err != nil {
		return 0, err
	}
	for key, wss := range users {
		for _, w := range wss {
			if w != wsID {
				keep[key] = true
			}
		}
	}
	var keys []string
	for _, snap := range snaps[:len(snaps)-1] {
		if snap.ReclaimedAt != nil {
			continue
		}
		for _, k := range receiptKeys(snap) {
			if !keep[k] {
				keep[k] = true // counted once
				keys = append(keys, k)
			}
		}
	}
	infos, err := s.statObjects(ctx, keys)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, info := range infos {
		n += info.Size
	}
	return n, nil
}

// handedBack is a reclaim that marked nothing and returned the workspace to closed: its newest
// receipt was not the one checked, or does not verify now.
type handedBack struct{ why string }

func (h *handedBack) Error() string { return "reclaim handed back: " + h.why }

// reclaim removes a reclaiming workspace's superseded storage and returns it to closed. Every
// step may be repeated: a sweep that stops anywhere is finished by the next one. Receipts are
// marked before their objects go, so nothing serves a receipt whose object may be gone.
// verified is the newest receipt this sweep just checked; any other newest receipt (the
// workspace was reopened, saved and closed again before the claim, or the claim is an earlier
// sweep's) is verified again first, and one that does not verify hands the claim back
// (*handedBack): the receipts behind it may be the only good copies.
func (s *Server) reclaim(ctx context.Context, ws api.Workspace, verified string) (int64, error) {
	snaps, err := s.store.ListSnapshots(ctx, ws.ID)
	if err != nil {
		return 0, err
	}
	if len(snaps) == 0 {
		return 0, s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FinishReclaim, "", "gc: nothing to reclaim")
	}
	if newest := snaps[len(snaps)-1]; newest.ID != verified {
		why := ""
		if verified != "" {
			why = "reopened and closed again during the sweep: the next sweep checks its new newest receipt " + newest.ID
		} else if _, err := s.verifySnapshot(ctx, newest); err != nil {
			why = fmt.Sprintf("its newest receipt %s does not verify (%s)", newest.ID, protocol.AsError(err).Message)
		}
		if why != "" {
			if err := s.store.TransitionWorkspace(context.WithoutCancel(ctx), ws.ID, wsstate.FinishReclaim, "", "gc: nothing reclaimed: "+why); err != nil {
				return 0, err
			}
			return 0, &handedBack{why}
		}
	}
	now := s.now()
	// The source base stays: a closed workspace's work can still be pulled into its source.
	superseded := slices.DeleteFunc(slices.Clone(snaps[:len(snaps)-1]), func(snap api.Snapshot) bool { return snap.ID == ws.SourceBase })
	for _, snap := range superseded {
		if snap.ReclaimedAt == nil {
			if err := s.store.ReclaimSnapshot(ctx, snap.ID, now); err != nil {
				return 0, err
			}
		}
	}
	if err := s.gcFault("receipts marked"); err != nil {
		return 0, err
	}
	// The superseded receipts' objects go through the sweep's one path: kept while another live
	// receipt names them (an incremental receipt's layers) or a read pins them. A rerun frees
	// only what is left, so bytes are counted once.
	var keys []string
	for _, snap := range superseded {
		keys = append(keys, receiptKeys(snap)...)
	}
	cands, err := s.statObjects(ctx, keys)
	if err != nil {
		return 0, err
	}
	fig, err := s.freeObjects(ctx, cands, false)
	freed := fig.Bytes
	if err != nil {
		return freed, err
	}
	if err := s.store.SetWorkspaceReclaimed(ctx, ws.ID, now); err != nil {
		return freed, err
	}
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FinishReclaim, "",
		fmt.Sprintf("gc: reclaimed %d bytes of superseded receipts", freed)); err != nil {
		return freed, err
	}
	return freed, nil
}

// finishReclaim waits for a running sweep and finishes a reclaim one left half done, then returns
// the workspace as it is now.
func (s *Server) finishReclaim(ctx context.Context, id string) (api.Workspace, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	release, err := s.clusterLock(ctx, lockGC)
	if err != nil {
		return api.Workspace{}, err
	}
	defer release()
	ws, err := s.workspace(ctx, id)
	if err != nil || ws.State != api.StateReclaiming {
		return ws, err
	}
	// Handed back is closed again with nothing reclaimed: the reopen goes on.
	if _, err := s.reclaim(ctx, ws, ""); err != nil && !errors.As(err, new(*handedBack)) {
		return ws, fmt.Errorf("finish the reclaim of %s: %w", ws.ID, err)
	}
	return s.workspace(ctx, id)
}

func (s *Server) gcFault(step string) error {
	if s.gcStep == nil {
		return nil
	}
	return s.gcStep(step)
}

// gcLoop runs a sweep every interval until ctx (the controller's routines') is done.
func (s *Server) gcLoop(ctx context.Context, interval, grace time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.GC(ctx, grace, false)
		if err != nil {
			s.log.Warn("gc sweep", "err", err)
			continue
		}
		if res.Bytes > 0 {
			s.log.Info("gc sweep", "reclaimed_bytes", res.Bytes, "candidates", len(res.Candidates))
		}
	}
}

// sweepBlobsOnce runs the blob sweep unless another controller of the cluster is running it.
func (s *Server) sweepBlobsOnce(ctx context.Context) error {
	release, ok, err := s.store.TryClusterLock(ctx, lockSweep)
	if err != nil || !ok {
		return err
	}
	defer release()
	return s.sweepBlobs(ctx)
}

// sweepBlobs removes what failed captures left: temporaries, and snapshot objects no receipt
// needs (sweepObjects). Both must be older than the grace, since another controller sharing the
// store may be about to write the receipt of a fresh one.
func (s *Server) sweepBlobs(ctx context.Context) error {
	grace := s.cfg.SweepGrace
	// Temporaries of uploads still running anywhere in the cluster are left alone, whatever
	// their age: only their heartbeat says whether they are alive.
	live, err := s.uploads.live(ctx)
	if err != nil {
		return err
	}
	// The store asks live only about temporaries past the grace, and removes those it answers
	// false for: both lists are logged, so an operator (and the cluster tests) can tell which
	// temporaries a sweep took and which it left to a running upload.
	var mu sync.Mutex
	left, taken := map[string]bool{}, map[string]bool{}
	decide := func(key string) bool {
		ok := live(key)
		mu.Lock()
		defer mu.Unlock()
		if ok {
			left[key] = true
		} else {
			taken[key] = true
		}
		return ok
	}
	n, err := s.blobs.SweepTemporaries(ctx, grace, decide)
	if len(left) > 0 {
		s.log.Info("blob sweep: left temporaries past the grace whose upload is running", "keys", slices.Sorted(maps.Keys(left)))
	}
	if len(taken) > 0 {
		s.log.Info("blob sweep: swept temporaries past the grace with no running upload", "keys", slices.Sorted(maps.Keys(taken)), "removed", n)
	}
	if err != nil {
		return err
	}
	_, err = s.sweepObjects(ctx, grace, false)
	return err
}
