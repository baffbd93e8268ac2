package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// maxRecoverNote bounds the note recorded with a recover decision.
const maxRecoverNote = 1024

func (s *Server) handleRecover(w http.ResponseWriter, r *http.Request) {
	var req api.RecoverRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	ws, err := s.RecoverWorkspace(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// RecoverWorkspace rebuilds a lost workspace on a fresh allocation of its provider from one of
// its own receipts (req.From, else the newest; an empty tree only when req.Empty and it has
// none), with a new writer epoch. The decision — who, from which receipt, the note — is the
// recover's event; the loss stays recorded, and the runs it failed stay failed. On failure the
// new allocation is destroyed and the workspace is lost again, with the reason.
func (s *Server) RecoverWorkspace(ctx context.Context, idOrName string, req api.RecoverRequest) (api.Workspace, error) {
	if err := checkRecoverNote(req.Note); err != nil {
		return api.Workspace{}, err
	}
	if req.Empty && req.From != "" {
		return api.Workspace{}, protocol.Errorf(protocol.CodeInvalidArgument, "--empty and --from exclude each other")
	}
	ws, err := s.workspace(ctx, idOrName)
	if err != nil {
		return ws, err
	}
	if ws.State != api.StateLost {
		return ws, protocol.Errorf(protocol.CodeConflict, "workspace %s is %s; only a lost workspace is recovered%s", ws.ID, ws.State, recoverHint(ws))
	}
	from, err := s.recoverSource(ctx, ws, req)
	if err != nil {
		return ws, err
	}
	prov, err := s.providerFor(ctx, ws.Provider)
	if err != nil {
		return ws, err
	}
	source := "an empty tree (the workspace had no receipt)"
	if from != nil {
		source = fmt.Sprintf("receipt %s (taken %s)", from.ID, stamp(from.CreatedAt))
	}
	decision := fmt.Sprintf("recover decided by %s: rebuild from %s on a fresh %s allocation; the loss stands and the runs it failed stay failed",
		principalOf(ctx), source, ws.Provider)
	if req.Note != "" {
		decision += "; note: " + req.Note
	}
	// Atomic: of racing recovers one moves the workspace, the others are refused.
	if err := s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartRecover, ws.Reason, decision); err != nil {
		return ws, err
	}
	return s.rebuild(ctx, ws, ws.Provider, prov, from, rebuildSteps{finish: wsstate.FinishRecover, fail: wsstate.FailRecover,
		done:   func(alloc string) string { return "recovered on allocation " + alloc + " from " + source },
		failed: "recover failed; the workspace is lost still"})
}

// recoverSource is the receipt a recover restores: req.From, which must be one of ws's own and
// still hold its bytes, else ws's newest; nil (an empty tree) only when ws has none and
// req.Empty asks for it.
func (s *Server) recoverSource(ctx context.Context, ws api.Workspace, req api.RecoverRequest) (*api.Snapshot, error) {
	if req.From != "" {
		snap, err := s.store.GetSnapshot(ctx, req.From)
		if err != nil {
			return nil, err
		}
		if snap.WorkspaceID != ws.ID {
			if !principalOf(ctx).sees(snap.WorkspaceID) {
				return nil, protocol.Errorf(protocol.CodeNotFound, "snapshot %s not found", req.From)
			}
			return nil, protocol.Errorf(protocol.CodeInvalidArgument,
				"snapshot %s is a receipt of workspace %s, not of %s: a recover continues the workspace's own work (to start from another workspace's receipt, use \"tether snapshot restore %s\")",
				snap.ID, snap.WorkspaceID, ws.ID, snap.ID)
		}
		if snap.ReclaimedAt != nil {
			return nil, protocol.Errorf(protocol.CodeConflict, "snapshot %s was reclaimed by gc: its bytes are gone; recover from a newer receipt", snap.ID)
		}
		return &snap, nil
	}
	last, err := s.lastReceipt(ctx, ws.ID)
	if err != nil {
		return nil, err
	}
	if last == nil && !req.Empty {
		return nil, protocol.Errorf(protocol.CodeConflict,
			"workspace %s has no receipt to recover from: everything it held was lost; pass --empty to rebuild it from an empty tree", ws.ID)
	}
	return last, nil
}

// recoverHint is the next step for a workspace a recover refused for its state.
func recoverHint(ws api.Workspace) string {
	switch ws.State {
	case api.StateClosed:
		return fmt.Sprintf(" (nothing was lost: reopen it with \"tether workspace reopen %s\")", ws.ID)
	case api.StateRecovering:
		return " (a recover is under way)"
	}
	return ""
}

// checkRecoverNote refuses a note too long or holding control characters (it is printed in
// event lists as it is).
func checkRecoverNote(note string) error {
	if len(note) > maxRecoverNote {
		return protocol.Errorf(protocol.CodeInvalidArgument, "note: %d bytes, at most %d", len(note), maxRecoverNote)
	}
	if !utf8.ValidString(note) || strings.ContainsFunc(note, unicode.IsControl) {
		return protocol.Errorf(protocol.CodeInvalidArgument, "note: must be printable UTF-8 text without control characters")
	}
	return nil
}
