package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/retention"
	"github.com/tetherhq/tether/protocol"
)

// Retention: receipts are removed (snapshot rm, snapshot prune, workspace rm --purge, and the
// default policy gc applies); their objects are not touched here. An object may be needed by
// other receipts (an incremental receipt names earlier receipts' objects in its layers), so only
// the sweep (storage.go), which sees every live receipt and every pin, deletes objects.

// receiptKeys are the objects a receipt needs: its own, its manifest's and its layers'.
func receiptKeys(snap api.Snapshot) []string {
	return append([]string{snap.ObjectKey, snap.ManifestKey}, snap.Layers...)
}

// pinReceipt pins snap's objects against gc and then checks the receipt is still there to read:
// a removal or reclaim that came first is seen here, and one that comes after finds the pin
// (the sweep reads pins on both sides of its read of the receipts).
func (s *Server) pinReceipt(ctx context.Context, snap api.Snapshot) (func(), error) {
	release, err := s.uploads.pin(receiptKeys(snap)...)
	if err != nil {
		return nil, err
	}
	cur, err := s.store.GetSnapshot(ctx, snap.ID)
	if err == nil && cur.ReclaimedAt != nil {
		err = protocol.Errorf(protocol.CodeNotFound, "snapshot %s was reclaimed by gc at %s: a newer receipt of workspace %s holds its work",
			snap.ID, cur.ReclaimedAt.UTC().Format(time.RFC3339), snap.WorkspaceID)
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

func (s *Server) handleSnapshotRemove(w http.ResponseWriter, r *http.Request) {
	snap, err := s.snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	// Fails closed: a workspace that cannot be read may be the one whose base this is.
	ws, err := s.store.GetWorkspace(r.Context(), snap.WorkspaceID)
	if err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
		writeError(w, err)
		return
	}
	if err == nil && ws.SourceBase == snap.ID {
		writeError(w, protocol.Errorf(protocol.CodeConflict,
			"snapshot %s is the source base of workspace %s: workspace pull compares with it (it goes with the workspace)", snap.ID, ws.Name))
		return
	}
	removed, err := s.store.RemoveSnapshot(r.Context(), snap.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("snapshot receipt removed", "snapshot", removed.ID, "workspace", removed.WorkspaceID, "by", principalOf(r.Context()))
	writeJSON(w, http.StatusOK, removed)
}

func (s *Server) handleSnapshotPrune(w http.ResponseWriter, r *http.Request) {
	var req api.PruneRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	policy := req.Policy
	if policy.Empty() {
		policy = s.cfg.Retention
	}
	if policy.Empty() {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument,
			"no retention policy: give --keep-last, --keep-hourly or --keep-daily (the controller has no default: tether serve --keep-*)"))
		return
	}
	res, err := s.prune(r.Context(), ws.ID, policy, req.DryRun)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// prune removes the receipts of a workspace that policy does not keep (none on a dry run).
// Reclaimed receipts are history holding no bytes: left alone. A prune stopped anywhere is
// finished by the next one, which plans again from the receipts left.
func (s *Server) prune(ctx context.Context, workspaceID string, policy api.RetentionPolicy, dryRun bool) (api.PruneResult, error) {
	res := api.PruneResult{WorkspaceID: workspaceID, Policy: policy, DryRun: dryRun, Kept: []api.PruneItem{}, Removed: []api.PruneItem{}}
	if err := retention.Check(policy); err != nil {
		return res, err
	}
	snaps, err := s.store.ListSnapshots(ctx, workspaceID)
	if err != nil {
		return res, err
	}
	ws, err := s.store.GetWorkspace(ctx, workspaceID)
	if err != nil {
		return res, err
	}
	live := snaps[:0:0]
	for _, snap := range snaps {
		switch {
		case snap.ReclaimedAt != nil:
		case snap.ID == ws.SourceBase:
			// A pull's base is no save point to thin out: it goes with the workspace.
			res.Kept = append(res.Kept, api.PruneItem{ID: snap.ID, CreatedAt: snap.CreatedAt, Bytes: snap.Bytes, Rules: []string{"source base"}})
		default:
			live = append(live, snap)
		}
	}
	kept, removed := retention.Plan(live, policy)
	if !dryRun && len(removed) > 0 {
		// The older receipts are the only good copies when the newest is damaged: nothing is
		// removed behind a newest receipt that does not verify.
		newest := snaps[len(snaps)-1]
		if _, err := s.verifySnapshot(ctx, newest); err != nil {
			if c := protocol.CodeOf(err); c != protocol.CodeCorrupt && c != protocol.CodeNotFound {
				return res, fmt.Errorf("%w: verify %s: %w", errNewestUnverified, newest.ID, err)
			}
			return res, fmt.Errorf("%w: %w", errNewestUnverified, protocol.Errorf(protocol.CodeCorrupt,
				"the newest receipt %s of workspace %s does not verify, so no receipt before it is removed: %v", newest.ID, workspaceID, err))
		}
	}
	res.Kept = append(res.Kept, kept...)
	for _, item := range removed {
		if !dryRun {
			if _, err := s.store.RemoveSnapshot(ctx, item.ID); err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
				return res, fmt.Errorf("prune %s: %w", item.ID, err)
			}
			if err := s.gcFault("receipt removed"); err != nil {
				return res, err
			}
		}
		res.Removed = append(res.Removed, item)
	}
	if !dryRun && len(removed) > 0 {
		s.log.Info("pruned receipts", "workspace", workspaceID, "policy", retention.Describe(policy), "removed", len(removed), "kept", len(kept))
	}
	return res, nil
}

// errNewestUnverified marks a prune refused because the newest receipt could not be verified
// (damaged, or unreadable now): gc then leaves that workspace for its next pass.
var errNewestUnverified = errors.New("the newest receipt was not verified")

// purgeParam reads DELETE /v1/workspaces/{id}'s purge query parameter.
func purgeParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("purge")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, protocol.Errorf(protocol.CodeInvalidArgument, "purge=%q is not a boolean", v)
	}
	return b, nil
}

// purgeWorkspace deletes a workspace (unless it already is) and removes every receipt of it.
// Stopped anywhere, it is finished by running it again on the deleted workspace (by id: a
// deleted workspace's name is free for a new one).
func (s *Server) purgeWorkspace(ctx context.Context, idOrName string) (api.PurgeResult, error) {
	res := api.PurgeResult{Removed: []string{}}
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return res, err
	}
	if ws.State != api.StateDeleted {
		if ws, err = s.deleteWorkspace(ctx, ws.ID); err != nil {
			return res, err
		}
	}
	res.Workspace = ws
	snaps, err := s.store.ListSnapshots(ctx, ws.ID)
	if err != nil {
		return res, err
	}
	for _, snap := range snaps {
		if _, err := s.store.RemoveSnapshot(ctx, snap.ID); err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
			return res, fmt.Errorf("purge %s: %w", snap.ID, err)
		}
		res.Removed = append(res.Removed, snap.ID)
		if err := s.gcFault("receipt removed"); err != nil {
			return res, err
		}
	}
	s.log.Info("workspace purged", "workspace", ws.ID, "receipts", len(res.Removed))
	return res, nil
}
