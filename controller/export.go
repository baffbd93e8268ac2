package controller

import (
	"net/http"
	"path/filepath"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// handleExport copies a workspace's files out through its provider's own file API into a
// directory on the controller's host: the way out when the runner cannot connect. The provider
// publishes each file whole or not at all and never replaces a newer host file.
func (s *Server) handleExport(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	// The destination is on the host of the sandbox (a local one's is the controller that made
	// it).
	if s.forwardToPlacement(w, r, ws) {
		return
	}
	var req api.ExportRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if !filepath.IsAbs(req.Dest) {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "dest %q must be an absolute directory on the controller's host", req.Dest))
		return
	}
	prov, err := s.providerFor(r.Context(), ws.Provider)
	if err != nil {
		writeError(w, err)
		return
	}
	ex, ok := prov.(provider.Exporter)
	if !ok {
		writeError(w, protocol.Errorf(protocol.CodeUnsupported, "provider %s cannot export files", ws.Provider))
		return
	}
	res, err := ex.ExportFiles(r.Context(), provider.ExportRequest{AllocationID: ws.AllocationID, Dest: filepath.Clean(req.Dest), MaxBytes: req.MaxBytes})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ExportResult{Files: res.Files, Bytes: res.Bytes, Skipped: res.Skipped})
}
