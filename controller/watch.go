package controller

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/watch"
)

// ContentTypeNDJSON is the type of a watch stream: one JSON object a line.
const ContentTypeNDJSON = "application/x-ndjson"

// HeaderWatches is the number of directories a watch holds, sent before its events.
const HeaderWatches = "X-Tether-Watches"

// maxWatchErrorMessage bounds the message of a runner's reason for ending a watch.
const maxWatchErrorMessage = 1 << 10

// handleWatch streams the changes under a directory of a live workspace
// (GET …/watch?path=P&recursive=B) as NDJSON, one protocol.WatchEvent a line, flushed whenever
// the runner has nothing more buffered. A refusal (missing, not a directory, a symlink, an
// escape) is an HTTP error; once the stream started, its end is one line of type "error" (the
// runner's connection dropped, the directory went away, the runner sent something a watch of P
// cannot report). Every event is decoded, checked (watch.Check) and encoded again here: what the
// client reads is never the runner's bytes.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	args := protocol.FsWatchArgs{Path: q.Get("path")}
	if args.Path == "" {
		args.Path = "."
	}
	top, err := fsguard.Clean(args.Path)
	if err != nil {
		writeError(w, err)
		return
	}
	args.Path = top
	if v := q.Get("recursive"); v != "" {
		if args.Recursive, err = strconv.ParseBool(v); err != nil {
			writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "recursive %q: want true or false", v))
			return
		}
	}
	ws, err := s.liveConn(ctx, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := s.reach(ctx, ws.AllocationID)
	if err != nil {
		writeError(w, err)
		return
	}
	var started protocol.FsWatchStarted
	st, done, err := c.OpenAnswered(ctx, protocol.OpFsWatch, args, s.cfg.Runners.Idle, &started)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	// A recursive watch of a large tree takes a while to set up; after that, a quiet
	// directory is no reason to end the stream.
	_ = st.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", ContentTypeNDJSON)
	h.Set(HeaderWatches, strconv.Itoa(started.Watches))
	w.WriteHeader(http.StatusOK)
	flusher := http.NewResponseController(w)
	_ = flusher.Flush()
	end := relayWatch(st, w, func() { _ = flusher.Flush() }, top, args.Recursive)
	if ctx.Err() != nil {
		return // the client went away
	}
	if protocol.CodeOf(end) == protocol.CodeCorrupt {
		s.log.Warn("watch event from the runner refused", "workspace", ws.ID, "path", top, "err", end)
	}
	_ = json.NewEncoder(w).Encode(protocol.WatchEvent{Type: protocol.WatchError, Time: s.now(), Error: protocol.AsError(end)})
	_ = flusher.Flush()
}

// relayWatch copies a runner's watch events from src to dst as NDJSON until the runner's stream
// ends, and returns why it ended: the runner's reason (not_found when the directory went away;
// any other reason it gives is failed), unavailable when its stream was cut, corrupt when it
// sent anything a watch of top could not report (the stream ends there: what followed would
// not be trusted either). flush is called whenever nothing more is buffered from the runner.
func relayWatch(src io.Reader, dst io.Writer, flush func(), top string, recursive bool) error {
	br := bufio.NewReaderSize(src, 64<<10)
	buf := make([]byte, protocol.MaxWatchEvent)
	enc := json.NewEncoder(dst)
	for {
		ch, p, err := protocol.ReadFrame(br, buf)
		if err != nil {
			return protocol.Errorf(protocol.CodeUnavailable, "the runner's watch stream ended (its connection dropped, or it stopped); changes from here on are not seen: %v", err)
		}
		switch ch {
		case protocol.ChanWatchEvent:
			ev, err := decodeWatchEvent(p, top, recursive)
			if err != nil {
				return err
			}
			if err := enc.Encode(ev); err != nil {
				return protocol.Errorf(protocol.CodeCanceled, "the client went away: %v", err)
			}
			if br.Buffered() == 0 {
				flush()
			}
		case protocol.ChanError:
			return runnerWatchEnd(p)
		default:
			return protocol.Errorf(protocol.CodeCorrupt, "the runner sent a frame on channel %d in a watch stream", ch)
		}
	}
}

// decodeWatchEvent decodes one runner event strictly (no unknown field, nothing after it, a
// bounded size) and checks it against the watch.
func decodeWatchEvent(p []byte, top string, recursive bool) (protocol.WatchEvent, error) {
	var ev protocol.WatchEvent
	if len(p) > protocol.MaxWatchEvent {
		return ev, protocol.Errorf(protocol.CodeCorrupt, "a watch event of %d bytes (at most %d)", len(p), protocol.MaxWatchEvent)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return ev, protocol.Errorf(protocol.CodeCorrupt, "a watch event that does not decode: %v", err)
	}
	if dec.More() {
		return ev, protocol.Errorf(protocol.CodeCorrupt, "a watch event with data after it")
	}
	if err := watch.Check(ev, top, recursive); err != nil {
		return ev, err
	}
	return ev, nil
}

// runnerWatchEnd is the runner's reason for ending a watch, as the client may see it: only the
// directory's going away keeps its code, and the message is bounded.
func runnerWatchEnd(p []byte) error {
	var e protocol.Error
	if len(p) > protocol.MaxWatchEvent || json.Unmarshal(p, &e) != nil {
		return protocol.Errorf(protocol.CodeCorrupt, "the runner ended the watch with an error frame that does not decode")
	}
	msg := e.Message
	if len(msg) > maxWatchErrorMessage {
		msg = msg[:maxWatchErrorMessage] + "…"
	}
	if e.Code == protocol.CodeNotFound {
		return protocol.Errorf(protocol.CodeNotFound, "%s", msg)
	}
	return protocol.Errorf(protocol.CodeFailed, "the runner ended the watch: %s", msg)
}
