package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/tetherhq/tether/protocol"
)

// handleRunLogs answers GET /v1/runs/{id}/logs?stdout_offset=&stderr_offset=&stream=&follow=
// with the run's log as channel frames (ContentTypeFrames): each stream's data from its offset,
// a ChanGap for bytes no longer held, ChanLogEnd last. A refusal before the first frame (unknown
// run, bad offset or stream) is an HTTP error; a failure after it is one ChanError frame, and a
// body that ends without ChanLogEnd was cut (the client resumes from the bytes it counted).
// Frames from the runner are read one by one, bounded, and only the log's channels pass.
func (s *Server) handleRunLogs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	run, err := s.run(ctx, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	args, err := runLogsArgs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	args.RunID = run.ID
	rc, err := s.reach(ctx, run.AllocationID)
	if err != nil {
		writeError(w, err)
		return
	}
	st, err := rc.Open(protocol.OpRunLogs, "", 0, args)
	if err != nil {
		writeError(w, err)
		return
	}
	defer st.Close()
	defer context.AfterFunc(ctx, func() { st.Close() })()
	buf := make([]byte, 256<<10)
	ch, p, err := protocol.ReadFrame(st, buf)
	if err != nil {
		writeError(w, protocol.Errorf(protocol.CodeUnavailable, "run %s: the runner's stream ended: %v", run.ID, err))
		return
	}
	if ch == protocol.ChanError {
		var e protocol.Error
		if json.Unmarshal(p, &e) != nil {
			e = *protocol.Errorf(protocol.CodeInternal, "bad error frame from the runner")
		}
		writeError(w, &e)
		return
	}
	w.Header().Set("Content-Type", ContentTypeFrames)
	w.WriteHeader(http.StatusOK)
	out := protocol.NewChannelWriter(w)
	flush := http.NewResponseController(w)
	// Every frame that moves the offsets is checked, and the JSON ones are passed on as decoded
	// here: a client resumes from the offsets it counts, so a runner's gap that does not continue
	// the output, or an end at other offsets, would double or drop bytes silently.
	cursor := protocol.LogCursor{Offsets: [2]int64{args.StdoutOffset, args.StderrOffset}}
	for {
		var bad error
		pass := true
		switch ch {
		case protocol.ChanStdout, protocol.ChanStderr:
			cursor.Data(ch, len(p))
		case protocol.ChanGap:
			var g protocol.LogGap
			if g, bad = cursor.Gap(p); bad == nil {
				p = mustJSON(g)
			}
		case protocol.ChanLogEnd:
			var end protocol.LogEnd
			if end, bad = cursor.End(p); bad == nil {
				p = mustJSON(end)
			}
		case protocol.ChanError:
			var e protocol.Error
			if json.Unmarshal(p, &e) != nil {
				e = *protocol.Errorf(protocol.CodeInternal, "bad error frame from the runner")
			}
			p = mustJSON(protocol.AsError(&e))
		default:
			pass = false // no other channel is passed on
		}
		if bad != nil {
			s.log.Warn("run log from the runner refused", "run", run.ID, "err", bad)
			_ = out.WriteJSONFrame(protocol.ChanError, protocol.AsError(bad))
			return
		}
		if pass {
			if out.WriteFrame(ch, p) != nil {
				return
			}
			// A follower sees output as it comes; a large replay is still written in frames
			// of up to 256 KiB, so a flush per frame costs little.
			_ = flush.Flush()
		}
		if ch == protocol.ChanLogEnd || ch == protocol.ChanError {
			return
		}
		if ch, p, err = protocol.ReadFrame(st, buf); err != nil {
			if ctx.Err() == nil {
				_ = out.WriteJSONFrame(protocol.ChanError, protocol.Errorf(protocol.CodeUnavailable, "run %s: the runner's stream ended: %v", run.ID, err))
			}
			return
		}
	}
}

func runLogsArgs(r *http.Request) (protocol.RunLogsArgs, error) {
	q := r.URL.Query()
	var a protocol.RunLogsArgs
	for _, f := range []struct {
		name string
		to   *int64
	}{{"stdout_offset", &a.StdoutOffset}, {"stderr_offset", &a.StderrOffset}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return a, protocol.Errorf(protocol.CodeInvalidArgument, "%s %q: want a byte offset", f.name, v)
			}
			*f.to = n
		}
	}
	a.Stream = q.Get("stream")
	if a.Stream != "" && a.Stream != protocol.StreamStdout && a.Stream != protocol.StreamStderr {
		return a, protocol.Errorf(protocol.CodeInvalidArgument, "stream %q: want %s or %s", a.Stream, protocol.StreamStdout, protocol.StreamStderr)
	}
	if v := q.Get("follow"); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			return a, protocol.Errorf(protocol.CodeInvalidArgument, "follow %q: want true or false", v)
		}
		a.Follow = f
	}
	return a, nil
}
