package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// RunLogsOptions select what RunLogs reads.
type RunLogsOptions struct {
	StdoutOffset, StderrOffset int64
	Stream                     string // "stdout", "stderr", or "" for both
	Follow                     bool   // go on until the run ended
	// Gap, when set, is called for bytes the run's log no longer held.
	Gap func(protocol.LogGap)
	// ResumeFor bounds how long a read cut short (a controller restart, a runner's socket
	// drop) is resumed from the bytes received (0: DefaultReattachFor; < 0: never).
	ResumeFor time.Duration
}

// RunLogs reads a run's log into stdout and stderr from the given offsets; with Follow, until
// the run ended. A read cut short is resumed from the offsets received, so nothing is lost or
// doubled. It returns the log's end frame (where each stream stopped, the exit once finished).
func (c *Client) RunLogs(ctx context.Context, runID string, o RunLogsOptions, stdout, stderr io.Writer) (protocol.LogEnd, error) {
	budget := o.ResumeFor
	if budget == 0 {
		budget = DefaultReattachFor
	}
	offs := [2]int64{o.StdoutOffset, o.StderrOffset}
	deadline := time.Now().Add(budget)
	wait := 100 * time.Millisecond
	for {
		end, progressed, err := c.readLogs(ctx, runID, o, &offs, stdout, stderr)
		if err == nil || ctx.Err() != nil || protocol.CodeOf(err) != protocol.CodeUnavailable || budget < 0 {
			return end, err
		}
		if progressed {
			deadline, wait = time.Now().Add(budget), 100*time.Millisecond
		}
		if time.Now().After(deadline) {
			return end, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return end, ctx.Err()
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// readLogs makes one read of the log from offs, updating them as bytes arrive.
func (c *Client) readLogs(ctx context.Context, runID string, o RunLogsOptions, offs *[2]int64, stdout, stderr io.Writer) (protocol.LogEnd, bool, error) {
	q := url.Values{}
	q.Set("stdout_offset", strconv.FormatInt(offs[0], 10))
	q.Set("stderr_offset", strconv.FormatInt(offs[1], 10))
	if o.Stream != "" {
		q.Set("stream", o.Stream)
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	resp, err := c.roundTrip(ctx, request{method: http.MethodGet, path: "/v1/runs/" + url.PathEscape(runID) + "/logs", query: q})
	if err != nil {
		return protocol.LogEnd{}, false, err
	}
	defer resp.Body.Close()
	buf := make([]byte, protocol.MaxChannelFrame)
	progressed := false
	for {
		ch, p, err := protocol.ReadFrame(resp.Body, buf)
		if err != nil {
			if ctx.Err() != nil {
				return protocol.LogEnd{}, progressed, ctx.Err()
			}
			return protocol.LogEnd{}, progressed, protocol.Errorf(protocol.CodeUnavailable, "the log of run %s was cut: %v", runID, err)
		}
		switch ch {
		case protocol.ChanStdout, protocol.ChanStderr:
			w, i := stdout, 0
			if ch == protocol.ChanStderr {
				w, i = stderr, 1
			}
			if _, err := w.Write(p); err != nil {
				return protocol.LogEnd{}, progressed, err
			}
			offs[i] += int64(len(p))
			progressed = true
		case protocol.ChanGap:
			cur := protocol.LogCursor{Offsets: *offs}
			g, err := cur.Gap(p)
			if err != nil {
				return protocol.LogEnd{}, progressed, err
			}
			*offs = cur.Offsets
			progressed = true
			if o.Gap != nil {
				o.Gap(g)
			}
		case protocol.ChanLogEnd:
			var end protocol.LogEnd
			if err := json.Unmarshal(p, &end); err != nil {
				return end, progressed, protocol.Errorf(protocol.CodeInternal, "bad log end frame: %v", err)
			}
			return end, progressed, nil
		case protocol.ChanError:
			var e protocol.Error
			if err := json.Unmarshal(p, &e); err != nil {
				return protocol.LogEnd{}, progressed, protocol.Errorf(protocol.CodeInternal, "bad error frame: %v", err)
			}
			return protocol.LogEnd{}, progressed, &e
		}
	}
}

// SignalRun sends a signal (a name like TERM or SIGTERM, or a number) to a running run's
// process group.
func (c *Client) SignalRun(ctx context.Context, runID, signal string) (api.Run, error) {
	raw, err := json.Marshal(signal)
	if err != nil {
		return api.Run{}, err
	}
	var r api.Run
	return r, c.sendJSON(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/signal", api.RunSignalRequest{Signal: raw}, &r)
}

// WaitRun blocks until the run ended and returns its record. A wait cut short (a controller
// restart) is made again: waiting changes nothing.
func (c *Client) WaitRun(ctx context.Context, runID string) (api.Run, error) {
	cl := c.WithRetryFor(DefaultReattachFor)
	for {
		var r api.Run
		start := time.Now()
		err := cl.do(ctx, request{method: http.MethodPost, path: "/v1/runs/" + url.PathEscape(runID) + "/wait", idempotent: true}, &r)
		// The retry budget counts the time the wait held too: a wait cut after holding longer
		// than it gets a fresh one; one that failed within its budget is down for good.
		if err == nil || ctx.Err() != nil || protocol.CodeOf(err) != protocol.CodeUnavailable || time.Since(start) < 2*DefaultReattachFor {
			return r, err
		}
	}
}
