package controller

import (
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/tree"
)

// Headers of a tree export.
const (
	// HeaderType is the exported path's type (file, dir, symlink), sent before the tar.
	HeaderType = "X-Tether-Type"
	// HeaderEntries is the number of entries the tar holds, an HTTP trailer: sent only once the
	// whole tar was relayed and checked, so a client that did not get it must not trust the
	// archive, whatever it holds.
	HeaderEntries = "X-Tether-Entries"
	// HeaderSkipped counts the sockets, fifos and devices the export left out (a trailer).
	HeaderSkipped = "X-Tether-Skipped"
)

// handleTreeExport streams a tar of one path of a live workspace (GET …/tree?path=P[&name=N]):
// the runner reads it through its guard, and the controller relays it entry by entry through
// tree.Relay, which passes on only canonical names beneath N, directories, regular files and
// symlinks, and the tar's end marker only once the runner's whole body arrived and verified. A
// failure after the first byte cuts the response off (no end marker, no trailer).
func (s *Server) handleTreeExport(w http.ResponseWriter, r *http.Request) {
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
	args := protocol.TreeExportArgs{Path: q.Get("path"), Name: q.Get("name")}
	if args.Path == "" {
		args.Path = "."
	}
	if args.Name == "" {
		args.Name = path.Base(args.Path)
		if args.Path == "." {
			// The root's own name inside the sandbox (/workspace → workspace).
			args.Name = path.Base(ws.Root)
			if args.Name == "/" || args.Name == "." {
				args.Name = "workspace"
			}
		}
	}
	lim := s.cfg.Runners
	var fi protocol.FileInfo
	st, done, err := c.OpenAnswered(r.Context(), protocol.OpTreeExport, args, lim.Idle, &fi)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	fromRunner := hub.IdleReader{St: st, Idle: lim.Idle}
	h := w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set(HeaderType, fi.Type)
	h.Set("Trailer", HeaderEntries+", "+HeaderSkipped)
	out := &heldWriter{w: w}
	body := protocol.NewBodyReader(fromRunner)
	stats, err := tree.Relay(r.Context(), out, body, tree.RelayOptions{Top: args.Name,
		MaxEntries: lim.MaxManifestEntries, MaxBytes: lim.MaxSnapshotBytes})
	if fsguard.CodeOf(err) != "" {
		// The relay's own refusal of what the runner sent, not a reason the runner gave.
		err = protocol.Errorf(protocol.CodeCorrupt, "the runner's tar of %s was refused: %v", args.Path, err)
	}
	var res protocol.TreeExportResult
	if err == nil {
		res, err = checkExportTrailer(st, stats)
	}
	if err != nil {
		if !out.sent {
			// Nothing reached the client yet: it gets the typed error, not a cut stream.
			h.Del("Trailer")
			h.Del(HeaderType)
			writeError(w, err)
			return
		}
		s.log.Warn("tree export cut off", "workspace", ws.ID, "path", args.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if err := out.commit(); err != nil {
		panic(http.ErrAbortHandler)
	}
	h.Set(HeaderEntries, strconv.Itoa(stats.Files+stats.Dirs+stats.Symlinks))
	h.Set(HeaderSkipped, strconv.Itoa(res.Skipped))
}

// checkExportTrailer reads the runner's final trailer and holds its counts to what was relayed.
func checkExportTrailer(st *yamux.Stream, relayed tree.Stats) (protocol.TreeExportResult, error) {
	var res protocol.TreeExportResult
	_ = st.SetReadDeadline(time.Now().Add(hub.TrailerWait))
	final, err := hub.ReadTrailer(st)
	if err != nil {
		return res, err
	}
	if err := hub.DecodeResult(final, &res); err != nil {
		return res, err
	}
	if res.Files != relayed.Files || res.Dirs != relayed.Dirs || res.Symlinks != relayed.Symlinks || res.Bytes != relayed.Bytes {
		return res, protocol.Errorf(protocol.CodeCorrupt, "the runner counted %d files, %d dirs, %d symlinks, %d bytes; its tar held %d, %d, %d, %d",
			res.Files, res.Dirs, res.Symlinks, res.Bytes, relayed.Files, relayed.Dirs, relayed.Symlinks, relayed.Bytes)
	}
	return res, nil
}

// heldBytes is how much of an export the controller holds back before answering: a refusal
// within it (a small tree, or a bad entry early on) reaches the client as a typed error instead
// of a cut stream.
const heldBytes = 64 << 10

// heldWriter holds the first heldBytes of a response, and the status line, until it commits.
type heldWriter struct {
	w    http.ResponseWriter
	buf  []byte
	sent bool // the status and the held bytes went out
}

func (h *heldWriter) Write(p []byte) (int, error) {
	if !h.sent {
		if len(h.buf)+len(p) <= heldBytes {
			h.buf = append(h.buf, p...)
			return len(p), nil
		}
		if err := h.commit(); err != nil {
			return 0, err
		}
	}
	return h.w.Write(p)
}

// commit sends the status and what was held.
func (h *heldWriter) commit() error {
	if h.sent {
		return nil
	}
	h.sent = true
	h.w.WriteHeader(http.StatusOK)
	_, err := h.w.Write(h.buf)
	h.buf = nil
	return err
}
