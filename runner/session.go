package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// hello introduces the runner on a fresh connection and takes the session token the welcome
// carries: a new one on every connect, which replaces the token the runner connected with. The
// runner confirms it holds the new token (WelcomeAck) so the controller can retire the old one.
func (r *Runner) hello(ctx context.Context, sess *yamux.Session) error {
	st, err := sess.OpenStream()
	if err != nil {
		return err
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	hello := protocol.Hello{
		ProtocolMin: protocol.ProtocolMin, ProtocolMax: protocol.ProtocolMax,
		RunnerVersion: r.cfg.Version, AllocationID: r.cfg.AllocationID,
		Capabilities: protocol.RunnerCapabilities(), PID: os.Getpid(), Root: r.cfg.Root,
		Runs: r.runs.snapshot(), Epoch: r.epoch.Load(), Services: r.services.List(),
	}
	// A controller that refuses the hello answers and closes the session at once, and yamux may
	// report that shutdown to a Write whose bytes did arrive. The answer, if any, says more than
	// the write error: a refusal must stop the runner, not look like a dropped connection.
	werr := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpHello})
	if werr == nil {
		werr = protocol.WriteJSON(st, hello)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		if werr != nil {
			return fmt.Errorf("hello: %w", werr)
		}
		return fmt.Errorf("hello: %w", err)
	}
	if err := tr.Err(); err != nil {
		switch protocol.CodeOf(err) {
		case protocol.CodeUnauthorized, protocol.CodeRevoked, protocol.CodeUnsupported, protocol.CodeInvalidArgument:
			return fmt.Errorf("%w: %v", ErrRefused, err)
		}
		// The controller could not take the hello just now (its store was busy, say): the token
		// was not spent, so the next attempt may succeed.
		return fmt.Errorf("hello: %w", err)
	}
	var w protocol.Welcome
	if err := json.Unmarshal(tr.Result, &w); err != nil {
		return fmt.Errorf("hello: welcome: %w", err)
	}
	_ = r.fence(w.Epoch)
	if w.SessionToken != "" {
		r.mu.Lock()
		r.token = w.SessionToken
		r.mu.Unlock()
		// Taken before it is confirmed: if the ack is lost, the controller still accepts the new
		// token (and then retires the old one).
		sum := sha256.Sum256([]byte(w.SessionToken))
		if err := protocol.WriteJSON(st, protocol.WelcomeAck{SessionTokenSHA256: hex.EncodeToString(sum[:])}); err != nil {
			return fmt.Errorf("hello: confirm the session token: %w", err)
		}
	}
	return nil
}

// dialError classifies a failed websocket dial. A token the controller refuses (401, 403) ends
// the runner: no retry can help. A refusal because the allocation already has a connected runner
// (StatusAllocationBusy) is retried like a dropped connection: this runner may be reconnecting
// before the controller found its old connection dead.
func dialError(resp *http.Response, err error) error {
	if resp == nil {
		return err
	}
	msg := resp.Status
	var body struct {
		Error protocol.Error `json:"error"`
	}
	if b, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<10)); rerr == nil && json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		msg = fmt.Sprintf("%s: %s", resp.Status, body.Error.Error())
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	case protocol.StatusAllocationBusy:
		return fmt.Errorf("controller: %s (retrying)", msg)
	}
	return fmt.Errorf("%w (%s)", err, msg)
}

// serve answers the controller's streams until the session ends.
func (r *Runner) serve(ctx context.Context, sess *yamux.Session) error {
	// Closing the session is what ends a connection when the runner stops; registered for this
	// session only, not left waiting on ctx after the session is gone.
	defer context.AfterFunc(ctx, func() { sess.Close() })()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return err
		}
		// A stream's handler may outlive its connection (an exec waits for its command, whose
		// exit goes out on the next connection): it belongs to the runner's routines, not to
		// this session's.
		if !r.routines.Go("stream", func(context.Context) { r.handle(ctx, st) }) {
			st.Close()
			return ctx.Err()
		}
	}
}

// handle serves one stream the controller opened: its header names the operation, which is
// fenced by the writer epoch when the protocol says so, then served by its handler.
func (r *Runner) handle(ctx context.Context, st *yamux.Stream) {
	defer st.Close()
	var h protocol.Header
	if err := protocol.ReadJSON(st, &h); err != nil {
		writeTrailer(st, nil, protocol.Errorf(protocol.CodeInvalidArgument, "header: %v", err))
		return
	}
	o, served := handlers[h.Op]
	if spec, ok := protocol.LookupOp(h.Op); ok && spec.Fenced() {
		if err := r.fence(h.Epoch); err != nil {
			// The controller stops sending a body as soon as this early answer arrives.
			o.refusal(st, err)
			return
		}
	}
	if !served {
		writeTrailer(st, nil, protocol.Errorf(protocol.CodeUnsupported, "operation %q is not supported by this runner", h.Op))
		return
	}
	if err := o.serve(r, ctx, st, h); err != nil {
		o.refusal(st, err)
	}
}

// currentEpoch answers OpSetEpoch, once the fence has taken the header's epoch.
func (r *Runner) currentEpoch(context.Context) (any, error) {
	return struct {
		Epoch uint64 `json:"epoch"`
	}{r.epoch.Load()}, nil
}

func writeTrailer(w io.Writer, result any, err error) {
	tr := protocol.Trailer{OK: err == nil}
	if err != nil {
		tr.Error = protocol.AsError(err)
	} else if result != nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			tr = protocol.Trailer{Error: protocol.AsError(merr)}
		}
		tr.Result = b
	}
	_ = protocol.WriteJSON(w, tr)
}
