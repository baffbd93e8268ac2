package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/controller/savedcopy"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

func snapshotKey(workspaceID, snapshotID string, encrypted bool) string {
	key := fmt.Sprintf("snapshots/%s/%s.tar.zst", workspaceID, snapshotID)
	if encrypted {
		key += ".age"
	}
	return key
}

func (s *Server) handleSnapshotCreate(w http.ResponseWriter, r *http.Request) {
	var opts api.CaptureOptions
	switch full := r.URL.Query().Get("full"); full {
	case "", "false":
	case "true":
		opts.Full = true
	default:
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "full=%q: want true or false", full))
		return
	}
	snap, err := s.CaptureSnapshot(r.Context(), r.PathValue("id"), opts)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap)
}

// CaptureSnapshot streams the workspace from its runner straight into the blob store and writes
// the receipt only once the object is stored whole: the body's byte count and SHA-256 matched
// what the runner sent, the store confirmed the size, and the runner reported success.
func (s *Server) CaptureSnapshot(ctx context.Context, idOrName string, opts api.CaptureOptions) (api.Snapshot, error) {
	ws, err := s.liveConn(ctx, idOrName)
	if err != nil {
		return api.Snapshot{}, err
	}
	return s.captureWorkspaceAs(ctx, ws, captureOpts{full: opts.Full})
}

// captureOnce is one capture attempt of ws from its connected runner (ready, or closing); see
// captureWorkspace.
func (s *Server) captureOnce(ctx context.Context, ws api.Workspace, opts captureOpts) (api.Snapshot, error) {
	c, err := s.reach(ctx, ws.AllocationID)
	if err != nil {
		return api.Snapshot{}, err
	}
	prev, err := s.store.ListSnapshots(ctx, ws.ID)
	if err != nil {
		return api.Snapshot{}, err
	}
	snap := api.Snapshot{ID: newID("snap_"), WorkspaceID: ws.ID, Epoch: ws.Epoch, Encrypted: s.encrypt}
	var parentSnap api.Snapshot
	if len(prev) > 0 {
		parentSnap = prev[len(prev)-1]
		snap.Parent = parentSnap.ID
	}
	snap.ObjectKey = snapshotKey(ws.ID, snap.ID, snap.Encrypted)
	snap.ManifestKey = savedcopy.ManifestKey(ws.ID, snap.ID, snap.Encrypted)
	// Pinned before the objects exist and until their receipt is written (or they are
	// discarded): gc deletes no object a capture is writing, whatever its grace. The layers
	// an incremental capture reuses are pinned too: between its check of them and its
	// receipt, a prune may remove the receipts that named them.
	var parent *savedcopy.ResolvedReader
	if !opts.full {
		parent = s.chooseParent(ctx, prev)
	}
	pins := []string{snap.ObjectKey, snap.ManifestKey}
	if parent != nil {
		pins = append(pins, receiptKeys(parentSnap)...)
	}
	unpin, err := s.uploads.pin(pins...)
	if err != nil {
		if parent != nil {
			parent.Close()
		}
		return snap, err
	}
	defer unpin()
	if parent != nil {
		// The parent was chosen before its layers were pinned: a prune and a sweep in between
		// may have freed them. Once pinned they stay, so one look after the pin settles it.
		if now, err := s.store.GetSnapshot(ctx, parentSnap.ID); err != nil || now.ReclaimedAt != nil {
			parent.Close()
			if err != nil && protocol.CodeOf(err) != protocol.CodeNotFound {
				return snap, err
			}
			return snap, fmt.Errorf("%w: its parent %s was removed before the capture began", errReceiptRaced, parentSnap.ID)
		}
	}
	args := protocol.SnapshotCaptureArgs{SnapshotID: snap.ID, WorkspaceID: ws.ID, Epoch: snap.Epoch, Parent: snap.Parent,
		Incremental: parent != nil}
	if parent != nil {
		args.ParentTree = parentSnap.Summary.Tree
	}
	if snap.Encrypted {
		args.Recipient = s.identity.Recipient().String()
	}
	st, err := c.Open(protocol.OpSnapshotCapture, snap.ID, 0, args)
	if err != nil {
		if parent != nil {
			parent.Close()
		}
		return snap, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	lim := s.cfg.Runners
	fromRunner := hub.IdleReader{St: st, Idle: lim.Idle}
	var reply protocol.Trailer
	if err := protocol.ReadJSON(fromRunner, &reply); err != nil {
		return snap, protocol.Errorf(protocol.CodeUnavailable, "no answer from the runner: %v", err)
	}
	if err := reply.Err(); err != nil {
		return snap, err
	}
	body := hub.NewCapReader(protocol.NewBodyReader(fromRunner), lim.MaxSnapshotBytes,
		fmt.Sprintf("the capture of workspace %s", ws.ID))
	res, err := s.startResolver(ctx, &snap, parent, parentSnap)
	if err != nil {
		return snap, err
	}
	defer res.close()
	check := s.startCaptureCheck(ctx, snap.Encrypted, res)
	info, err := s.blobs.Put(ctx, snap.ObjectKey, check.tee(meteredReader{body, s.metrics.BytesCounter(metrics.KindSnapshotCapture)}), "")
	verified, verr := check.result()
	if err != nil {
		// The check's reason, when it stopped the store, is the one that explains.
		if verr != nil && protocol.CodeOf(verr) != protocol.CodeFailed {
			err = verr
		}
		if derr := s.blobs.Delete(context.WithoutCancel(ctx), snap.ManifestKey); derr != nil {
			s.log.Error("remove unreceipted snapshot manifest", "key", snap.ManifestKey, "err", derr)
		}
		s.strikeCapture(c, err)
		return snap, fmt.Errorf("store snapshot: %w", err)
	}
	// From here the object exists; every failure removes it again before answering.
	discard := func(err error) (api.Snapshot, error) {
		for _, key := range []string{snap.ObjectKey, snap.ManifestKey} {
			if derr := s.blobs.Delete(context.WithoutCancel(ctx), key); derr != nil {
				s.log.Error("remove unreceipted snapshot object", "key", key, "err", derr)
			}
		}
		s.strikeCapture(c, err)
		return api.Snapshot{}, err
	}
	if verr != nil {
		return discard(verr)
	}
	_ = st.SetReadDeadline(time.Now().Add(hub.TrailerWait))
	final, err := hub.ReadTrailer(st)
	if err != nil {
		return discard(err)
	}
	var claimed protocol.SnapshotSummary
	if err := hub.DecodeResult(final, &claimed); err != nil {
		return discard(err)
	}
	if snap.Summary, err = matchCapture(snap, verified, claimed); err != nil {
		return discard(err)
	}
	// A receipt records the tree of one writer epoch; if a new writer took over meanwhile, what
	// was captured may mix two writers' work.
	if now, err := s.store.GetWorkspace(ctx, ws.ID); err != nil {
		return discard(err)
	} else if now.Epoch != snap.Epoch {
		return discard(protocol.Errorf(protocol.CodeStaleEpoch, "the writer epoch moved from %d to %d during the capture", snap.Epoch, now.Epoch))
	}
	if opts.checkpoint {
		if same := unchangedSince(prev, snap.Summary.Tree); same != nil {
			// Nothing changed since the newest receipt: its object goes, and no receipt is
			// written (a verified tree equal to a receipt's is no evidence against the runner).
			for _, key := range []string{snap.ObjectKey, snap.ManifestKey} {
				if derr := s.blobs.Delete(context.WithoutCancel(ctx), key); derr != nil {
					s.log.Error("remove the objects of an unchanged checkpoint", "key", key, "err", derr)
				}
			}
			return *same, errTreeUnchanged
		}
		snap.Checkpoint = true
	}
	snap.Bytes, snap.SHA256 = info.Size, info.SHA256
	snap.Layers = res.layerKeys()
	snap.Entries, snap.Git = snap.Summary.Entries, snap.Summary.Git
	snap.CreatedAt = s.now()
	written, err := s.store.AppendSnapshot(context.WithoutCancel(ctx), snap)
	if err != nil {
		if protocol.CodeOf(err) == protocol.CodeConflict {
			err = fmt.Errorf("%w: %w", errReceiptRaced, err)
		}
		return discard(err)
	}
	return written, nil
}

// errReceiptRaced is a capture that lost a race with another receipt of its workspace (or with
// its removal): what it captured is not published, and captureWorkspace starts again from the
// newest receipt.
var errReceiptRaced = protocol.Errorf(protocol.CodeConflict, "another receipt of the workspace was written during the capture")

func (s *Server) handleSnapshotList(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := s.store.ListSnapshots(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleSnapshotShow(w http.ResponseWriter, r *http.Request) {
	snap, err := s.snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) handleSnapshotRestore(w http.ResponseWriter, r *http.Request) {
	var req api.RestoreRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	res, err := s.RestoreSnapshot(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

// RestoreSnapshot creates a fresh workspace and restores the snapshot into it. If anything
// fails, the new workspace is removed: a half-restored workspace is never handed out.
func (s *Server) RestoreSnapshot(ctx context.Context, id string, req api.RestoreRequest) (api.RestoreResult, error) {
	snap, err := s.snapshot(ctx, id)
	if err != nil {
		return api.RestoreResult{}, err
	}
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	var newID string
	discard := func() {
		if newID == "" {
			return
		}
		// By id, never by name: when the name was taken, the create failed before recording
		// newID's workspace, and removing it is not_found.
		if derr := s.DeleteWorkspace(context.WithoutCancel(ctx), newID); derr != nil && protocol.CodeOf(derr) != protocol.CodeNotFound {
			s.log.Error("remove workspace of a failed restore", "workspace", newID, "err", derr)
		}
	}
	fail := func(err error) (api.RestoreResult, error) {
		discard()
		return api.RestoreResult{}, err
	}
	// Provisioning is waited for even when the request ends first: the workspace it makes is
	// removed only once provisioning is over, so no sandbox starts behind the removal and nothing
	// half-made is left (a workspace of a restore is never handed out unrestored).
	ws, err := s.createWorkspace(context.WithoutCancel(ctx), api.CreateWorkspaceRequest{Name: req.Name, Provider: req.Provider, Options: req.Options},
		func(id string) { newID, release = id, s.busy.hold(id) })
	if err != nil {
		return fail(err)
	}
	if ws.State != api.StateReady {
		return fail(protocol.Errorf(protocol.CodeProviderFailed, "workspace %s failed: %s", ws.ID, ws.Reason))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	c, err := s.runnerFor(ctx, ws.ID)
	if err != nil {
		return fail(err)
	}
	if err := s.restoreInto(ctx, c, snap, ws.Epoch); err != nil {
		return fail(err)
	}
	ws, err = s.workspace(ctx, ws.ID)
	if err != nil {
		return fail(err)
	}
	return api.RestoreResult{Workspace: ws, Snapshot: snap}, nil
}

// handleSnapshotArchive serves the plain .tar.zst (decrypted); the response is cut off, never
// ended, if the stored object does not match its receipt.
func (s *Server) handleSnapshotArchive(w http.ResponseWriter, r *http.Request) {
	snap, err := s.snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	archive, closeArchive, err := s.archives.Open(r.Context(), snap)
	if err != nil {
		writeError(w, err)
		return
	}
	defer closeArchive()
	w.Header().Set("Content-Type", "application/zstd")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", snap.ID+".tar.zst"))
	if _, err := io.Copy(w, archive); err != nil {
		s.log.Warn("snapshot export cut off", "snapshot", snap.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) handleSnapshotVerify(w http.ResponseWriter, r *http.Request) {
	snap, err := s.snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.verifySnapshot(r.Context(), snap)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// verifySnapshot re-reads the stored object: size and SHA-256 against the receipt, then the
// archive itself, whose manifest must be the one recorded at capture.
func (s *Server) verifySnapshot(ctx context.Context, snap api.Snapshot) (api.VerifyResult, error) {
	if _, err := s.archives.Verify(ctx, &snap, nil); err != nil {
		// Whatever is wrong with the archive itself (too many entries, another version) is
		// damage to this receipt's object.
		var bad *snapshot.Error
		if errors.As(err, &bad) && bad.Code != snapshot.CodeCorrupt {
			err = protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %v", snap.ID, err)
		}
		return api.VerifyResult{}, err
	}
	return api.VerifyResult{ID: snap.ID, OK: true, Bytes: snap.Bytes, SHA256: snap.SHA256}, nil
}

// restoreInto streams a snapshot, checked against its receipt as it flows, into the empty
// workspace of runner c, which publishes it only when every entry matched the manifest.
func (s *Server) restoreInto(ctx context.Context, c *hub.Conn, snap api.Snapshot, epoch uint64) (err error) {
	start := time.Now()
	defer func() { s.metrics.Restore(time.Since(start), err) }()
	archive, closeArchive, err := s.archives.Open(ctx, snap)
	if err != nil {
		return err
	}
	defer closeArchive()
	var summary protocol.SnapshotSummary
	limit := s.cfg.Runners.MaxRestoreBytes
	if snap.Summary.Bytes > limit {
		// Refused before a byte is sent: a tree of sparse files can be tiny as an archive and
		// vast once restored.
		return protocol.Errorf(protocol.CodeTooLarge, "snapshot %s holds files %d bytes long in all, more than the %d-byte restore limit (--max-restore-bytes)",
			snap.ID, snap.Summary.Bytes, limit)
	}
	args := protocol.SnapshotRestoreArgs{SnapshotID: snap.ID, MaxEntries: snap.Summary.Entries, MaxBytes: snap.Summary.Bytes,
		MaxApparentBytes: limit}
	sent := meteredReader{archive, s.metrics.BytesCounter(metrics.KindSnapshotRestore)}
	return c.CallWithBody(ctx, protocol.OpSnapshotRestore, epoch, args, sent, &summary)
}

// snapshot loads a receipt by id, refusing ids of other kinds; another workspace's than a
// limited token's is not_found.
func (s *Server) snapshot(ctx context.Context, id string) (api.Snapshot, error) {
	if err := expectKind(id, "snap_"); err != nil {
		return api.Snapshot{}, err
	}
	snap, err := s.store.GetSnapshot(ctx, id)
	if err == nil && !principalOf(ctx).sees(snap.WorkspaceID) {
		return api.Snapshot{}, notFound("snapshot", id)
	}
	return snap, err
}
