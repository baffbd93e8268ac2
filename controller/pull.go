package controller

// Bringing a --source workspace's work back to its host directory (tether workspace pull). The
// controller's part is read-only and works on receipts: the base is the receipt taken right
// after the source was imported, the workspace's side a fresh capture (or a receipt), so the
// plan it answers and the bytes the CLI then asks for are the same tree. The three-way merge
// itself happens on the operator's host, in the CLI, which alone can see the host directory.

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// maxFilesBody bounds POST /v1/snapshots/{id}/files's body: MaxFilesRequest paths.
const maxFilesBody = 64 << 20

// handleSetSource records where a workspace's tree came from and captures what it received:
// the base every later pull compares both sides with.
func (s *Server) handleSetSource(w http.ResponseWriter, r *http.Request) {
	var req api.SourceRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if !filepath.IsAbs(req.Dir) || len(req.Dir) > 4096 || strings.ContainsRune(req.Dir, 0) {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "dir %q: want an absolute host path", req.Dir))
		return
	}
	ws, err := s.liveConn(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if ws.SourceBase != "" {
		writeError(w, protocol.Errorf(protocol.CodeConflict, "workspace %s already has a source base (%s)", ws.ID, ws.SourceBase))
		return
	}
	snap, err := s.captureWorkspaceAs(r.Context(), ws, captureOpts{full: true})
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.store.SetWorkspaceSource(r.Context(), ws.ID, filepath.Clean(req.Dir), snap.ID); err != nil {
		writeError(w, err)
		return
	}
	ws, err = s.workspace(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// handlePull answers the plan of a pull: what the workspace changed since its base.
func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	var req api.PullRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	plan, err := s.pullPlan(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, plan)
}

func (s *Server) pullPlan(ctx context.Context, idOrName string, req api.PullRequest) (api.PullPlan, error) {
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return api.PullPlan{}, err
	}
	if ws.SourceBase == "" && ws.Git != nil && ws.Git.ProjectID != "" {
		return s.projectPullPlan(ctx, ws)
	}
	if ws.SourceBase == "" {
		return api.PullPlan{}, protocol.Errorf(protocol.CodeUnsupported,
			"workspace %s has no source to pull into: it was not created with --source; copy its files with tether cp", ws.Name)
	}
	base, err := s.store.GetSnapshot(ctx, ws.SourceBase)
	if err != nil {
		return api.PullPlan{}, err
	}
	plan := api.PullPlan{WorkspaceID: ws.ID, WorkspaceName: ws.Name, SourceDir: ws.SourceDir, Base: base.ID, BaseGit: gitHead(base)}
	var now api.Snapshot
	switch {
	case req.Snapshot != "":
		if now, err = s.snapshot(ctx, req.Snapshot); err != nil {
			return plan, err
		}
		if now.WorkspaceID != ws.ID {
			return plan, protocol.Errorf(protocol.CodeInvalidArgument, "snapshot %s is not a receipt of workspace %s", now.ID, ws.Name)
		}
	case ws.State == api.StateReady && ws.Connected:
		// A checkpoint-style capture keeps no receipt when the tree is the newest one's.
		now, err = s.captureWorkspaceAs(ctx, ws, captureOpts{checkpoint: true})
		if err != nil && !errors.Is(err, errTreeUnchanged) {
			return plan, err
		}
		plan.Fresh = true
	default:
		snaps, err := s.store.ListSnapshots(ctx, ws.ID)
		if err != nil {
			return plan, err
		}
		for i := len(snaps) - 1; i >= 0 && now.ID == ""; i-- {
			if snaps[i].ReclaimedAt == nil {
				now = snaps[i]
			}
		}
		if now.ID == "" {
			return plan, protocol.Errorf(protocol.CodeUnavailable, "workspace %s has no runner connected and no receipt to pull", ws.Name)
		}
	}
	plan.Snapshot, plan.Git = now.ID, gitHead(now)
	if plan.Changes, plan.Skipped, err = s.archives.Diff(ctx, base, now); err != nil {
		return plan, err
	}
	return plan, nil
}

// projectPullPlan is a project workspace's pull: its commits, read live (or from its last
// receipt), to be delivered as its branch to the project's source. Its files are not pulled:
// what is not committed stays in the workspace, and the plan says how much.
func (s *Server) projectPullPlan(ctx context.Context, ws api.Workspace) (api.PullPlan, error) {
	ws, p, err := s.gitWorkspace(ctx, ws.ID)
	if err != nil {
		return api.PullPlan{}, err
	}
	st, _, err := s.headState(ctx, ws, ws.Git.BaseCommit)
	if err != nil {
		return api.PullPlan{}, err
	}
	plan := api.PullPlan{WorkspaceID: ws.ID, WorkspaceName: ws.Name, Changes: []api.PathChange{},
		BaseGit:     &api.GitHead{Head: ws.Git.BaseCommit, Branch: ws.Git.BaseRef},
		Project:     &api.PullProject{ID: p.ID, Name: p.Name, Source: p.Source, Branch: ws.Git.Branch, Haves: []string{ws.Git.BaseCommit}},
		Uncommitted: st.Staged + st.Unstaged + st.Untracked}
	if ws.Git.StartCommit != "" {
		plan.Project.Haves = append(plan.Project.Haves, ws.Git.StartCommit)
	}
	if api.IsObjectID(st.Head) {
		plan.Git = &api.GitHead{Head: st.Head, Branch: st.Branch}
	}
	return plan, nil
}

// handlePulled moves a workspace's base to the receipt a pull brought back whole: the host
// directory now holds that tree (or, for each conflict, a version its owner chose), so the next
// pull compares with it — else every path the agent changed twice would be a conflict.
func (s *Server) handlePulled(w http.ResponseWriter, r *http.Request) {
	var req api.PulledRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	snap, err := s.snapshot(r.Context(), req.Snapshot)
	if err != nil {
		writeError(w, err)
		return
	}
	if snap.WorkspaceID != ws.ID || snap.ReclaimedAt != nil {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "snapshot %s is not a live receipt of workspace %s", snap.ID, ws.Name))
		return
	}
	if req.Base == snap.ID {
		writeJSON(w, http.StatusOK, ws)
		return
	}
	if err := s.store.AdvanceSourceBase(r.Context(), ws.ID, req.Base, snap.ID); err != nil {
		writeError(w, err)
		return
	}
	if ws, err = s.workspace(r.Context(), ws.ID); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// gitHead reads the repository state a receipt recorded; nil when it has none. The runner wrote
// it: a head that is not an object id is none (it will be an argument to host Git).
func gitHead(snap api.Snapshot) *api.GitHead {
	var g api.GitHead
	if len(snap.Git) == 0 || json.Unmarshal(snap.Git, &g) != nil || !api.IsObjectID(g.Head) {
		return nil
	}
	return &g
}

// handleSnapshotFiles streams the regular files a pull asks for, from a receipt, as a tar.
func (s *Server) handleSnapshotFiles(w http.ResponseWriter, r *http.Request) {
	snap, err := s.snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.FilesRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxFilesBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "request body: %v", err))
		return
	}
	want, err := s.archives.CheckFiles(r.Context(), snap, req.Paths)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Trailer", HeaderEntries)
	w.WriteHeader(http.StatusOK)
	if err := s.archives.Files(r.Context(), snap, want, tar.NewWriter(w)); err != nil {
		// Bytes went out already: the response is cut off, and the client, missing the
		// trailer, takes nothing of it.
		s.log.Warn("snapshot files cut off", "snapshot", snap.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	w.Header().Set(HeaderEntries, strconv.Itoa(len(want)))
}

// handleGitPack relays a pack of the workspace's commits from its runner, bounded.
func (s *Server) handleGitPack(w http.ResponseWriter, r *http.Request) {
	ws, err := s.liveConn(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := s.reach(r.Context(), ws.AllocationID)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	args := protocol.GitPackArgs{Want: q.Get("want"), Haves: q["have"]}
	lim := s.cfg.Runners
	var info protocol.GitPackInfo
	st, done, err := c.OpenAnswered(r.Context(), protocol.OpGitPack, args, lim.Idle, &info)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	fromRunner := hub.IdleReader{St: st, Idle: lim.Idle}
	w.Header().Set("Content-Type", "application/x-git-packfile")
	w.Header().Set("Trailer", HeaderEntries)
	w.WriteHeader(http.StatusOK)
	body := protocol.NewBodyReader(fromRunner)
	n, err := io.Copy(w, hub.NewCapReader(body, lim.MaxSnapshotBytes, "the runner's git pack"))
	var res protocol.GitPackResult
	if err == nil {
		var done protocol.Trailer
		if err = protocol.ReadJSON(fromRunner, &done); err == nil {
			err = hub.DecodeResult(done, &res)
		}
	}
	if err == nil && (res.Bytes != n || res.Objects != info.Objects) {
		err = protocol.Errorf(protocol.CodeCorrupt, "the runner's pack trailer (%d bytes, %d objects) is not what it sent (%d bytes, %d objects)",
			res.Bytes, res.Objects, n, info.Objects)
	}
	if err != nil {
		s.log.Warn("git pack cut off", "workspace", ws.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	w.Header().Set(HeaderEntries, strconv.Itoa(res.Objects))
}
