package controller

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/blob"
)

// Storage: which snapshot objects are needed, and the one code path that deletes those that are
// not. An object is needed while a live receipt names it (store.SnapshotObjectKeys: its own,
// manifest or layer object) or while a capture or a read pins it (uploads.go). Deleting needs
// no record of its own: a sweep killed anywhere left only objects it would delete again, and
// never one that is needed, so the next sweep finishes it.

// snapshotPrefix is where snapshot objects live in the blob store.
const snapshotPrefix = "snapshots/"

// sweepObjects deletes the snapshot objects no live receipt needs and no one pins, stored at
// least grace ago (none on a dry run, which only counts them). The grace keeps the fresh object
// of a capture whose controller pins nothing (an older version sharing the store); pinned ones
// are kept whatever it is.
func (s *Server) sweepObjects(ctx context.Context, grace time.Duration, dryRun bool) (api.StorageFigure, error) {
	objs, err := s.blobs.List(ctx, snapshotPrefix)
	if err != nil {
		return api.StorageFigure{}, err
	}
	if err := s.gcFault("objects listed"); err != nil {
		return api.StorageFigure{}, err
	}
	// ModTime is the blob store's wall time, so the age is too.
	old := slices.DeleteFunc(objs, func(o blob.Info) bool { return time.Since(o.ModTime) < grace })
	return s.freeObjects(ctx, old, dryRun)
}

// freeObjects deletes those of cands (listed before the call) that are not needed, and counts
// them. The pins are read on both sides of the receipts: a capture pins its object before it
// exists and unpins after its receipt is written, so it is seen in the first read or in the
// receipts; a read pins and then checks its receipt is still there, so it is seen in the
// receipts or in the second read.
func (s *Server) freeObjects(ctx context.Context, cands []blob.Info, dryRun bool) (api.StorageFigure, error) {
	var freed api.StorageFigure
	before, err := s.uploads.pinned(ctx)
	if err != nil {
		return freed, err
	}
	needed, err := s.store.SnapshotObjectKeys(ctx)
	if err != nil {
		return freed, err
	}
	after, err := s.uploads.pinned(ctx)
	if err != nil {
		return freed, err
	}
	for _, o := range cands {
		if needed[o.Key] || before[o.Key] || after[o.Key] {
			continue
		}
		if !dryRun {
			if err := s.blobs.Delete(ctx, o.Key); err != nil {
				return freed, err
			}
			s.log.Info("deleted snapshot object no receipt needs", "key", o.Key, "bytes", o.Size)
		}
		freed.Objects++
		freed.Bytes += o.Size
		if !dryRun {
			if err := s.gcFault("object deleted"); err != nil {
				return freed, err
			}
		}
	}
	return freed, nil
}

// statObjects lists the stored objects among keys (missing ones are left out: already deleted).
func (s *Server) statObjects(ctx context.Context, keys []string) ([]blob.Info, error) {
	var out []blob.Info
	for _, k := range keys {
		if k == "" {
			continue
		}
		info, err := s.blobs.Stat(ctx, k)
		if blob.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func (s *Server) handleStorage(w http.ResponseWriter, r *http.Request) {
	u, err := s.StorageUsage(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

// StorageUsage sorts the stored snapshot objects by who needs them, with sizes from the blob
// store's listing: each workspace's own (only its receipts need them), shared (receipts of
// several workspaces need them), in flight (no receipt, but pinned) and unreferenced (what the
// next gc with no grace frees).
func (s *Server) StorageUsage(ctx context.Context) (api.StorageUsage, error) {
	u := api.StorageUsage{Workspaces: []api.WorkspaceStorage{}}
	objs, err := s.blobs.List(ctx, snapshotPrefix)
	if err != nil {
		return u, err
	}
	pinned, err := s.uploads.pinned(ctx)
	if err != nil {
		return u, err
	}
	users, err := s.store.SnapshotObjectUsers(ctx)
	if err != nil {
		return u, err
	}
	all, err := s.store.ListWorkspaces(ctx, true)
	if err != nil {
		return u, err
	}
	own := map[string]*api.StorageFigure{}
	for _, o := range objs {
		fig := &u.Unreferenced
		switch ws := users[o.Key]; {
		case len(ws) == 1:
			if own[ws[0]] == nil {
				own[ws[0]] = &api.StorageFigure{}
			}
			fig = own[ws[0]]
		case len(ws) > 1:
			fig = &u.Shared
		case pinned[o.Key]:
			fig = &u.InFlight
		}
		fig.Objects++
		fig.Bytes += o.Size
		u.Total.Objects++
		u.Total.Bytes += o.Size
	}
	for _, ws := range all {
		if fig := own[ws.ID]; fig != nil {
			u.Workspaces = append(u.Workspaces, api.WorkspaceStorage{WorkspaceID: ws.ID, Name: ws.Name, State: ws.State, StorageFigure: *fig})
			delete(own, ws.ID)
		}
	}
	// Receipts of a workspace the store no longer lists cannot be; shown rather than hidden.
	for _, id := range slices.Sorted(maps.Keys(own)) {
		u.Workspaces = append(u.Workspaces, api.WorkspaceStorage{WorkspaceID: id, StorageFigure: *own[id]})
	}
	slices.SortStableFunc(u.Workspaces, func(a, b api.WorkspaceStorage) int { return strings.Compare(a.WorkspaceID, b.WorkspaceID) })
	return u, nil
}
