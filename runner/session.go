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
		Capabilities: protocol.RunnerCapabilities, PID: os.Getpid(), Root: r.cfg.Root,
		Runs: r.runs.snapshot(), Epoch: r.epoch.Load(), Services: r.services.List(),
	}
	// A controller that refuses the hello answers and closes the session at once, and yamux may
	// report that shutdown to a Write whose bytes did arrive. The answer, if any, says more than
	// the write error: a refusal must stop the runner, not look like a dropped connection.
	werr := protocol.WriteJSON(st, protocol.Header{Op: "hello"})
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
	go func() {
		<-ctx.Done()
		sess.Close()
	}()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return err
		}
		go r.handle(ctx, st)
	}
}

func (r *Runner) handle(ctx context.Context, st *yamux.Stream) {
	defer st.Close()
	var h protocol.Header
	if err := protocol.ReadJSON(st, &h); err != nil {
		writeTrailer(st, nil, protocol.Errorf(protocol.CodeInvalidArgument, "header: %v", err))
		return
	}
	if protocol.Mutating(h.Op) || h.Op == protocol.OpSetEpoch {
		if err := r.fence(h.Epoch); err != nil {
			if h.Op == protocol.OpExec {
				_ = protocol.NewChannelWriter(st).WriteJSONFrame(protocol.ChanExit, protocol.ExecExit{ExitCode: -1, Error: protocol.AsError(err)})
			} else {
				// The controller stops sending a body as soon as this early answer arrives.
				writeTrailer(st, nil, err)
			}
			return
		}
	}
	switch h.Op {
	case protocol.OpSetEpoch:
		writeTrailer(st, struct {
			Epoch uint64 `json:"epoch"`
		}{r.epoch.Load()}, nil)
	case protocol.OpExec:
		r.exec(st, h)
	case protocol.OpTreeImport:
		res, err := r.treeImport(ctx, st, h)
		writeTrailer(st, res, err)
	case protocol.OpFsWrite:
		res, err := r.fsWrite(ctx, st, h)
		writeTrailer(st, res, err)
	case protocol.OpFsRead:
		r.fsRead(st, h)
	case protocol.OpSnapshotCapture:
		r.snapshotCapture(ctx, st, h)
	case protocol.OpTreeDigest:
		res, err := r.treeDigest(ctx, h)
		writeTrailer(st, res, err)
	case protocol.OpSnapshotRestore:
		res, err := r.snapshotRestore(ctx, st, h)
		writeTrailer(st, res, err)
	case protocol.OpFsStat:
		res, err := r.fsStat(h)
		writeTrailer(st, res, err)
	case protocol.OpFsList:
		res, err := r.fsList(h)
		writeTrailer(st, res, err)
	case protocol.OpFsMkdir:
		res, err := r.fsMkdir(h)
		writeTrailer(st, res, err)
	case protocol.OpFsRemove:
		res, err := r.fsRemove(h)
		writeTrailer(st, res, err)
	case protocol.OpFsRename:
		res, err := r.fsRename(h)
		writeTrailer(st, res, err)
	case protocol.OpFsChmod:
		res, err := r.fsChmod(h)
		writeTrailer(st, res, err)
	case protocol.OpServiceStart:
		res, err := r.serviceStart(ctx, h)
		writeTrailer(st, res, err)
	case protocol.OpServiceList:
		writeTrailer(st, r.services.List(), nil)
	case protocol.OpServiceLogs:
		r.serviceLogs(ctx, st, h)
	case protocol.OpServiceStop:
		res, err := r.serviceStop(ctx, h)
		writeTrailer(st, res, err)
	case protocol.OpGitCheckout:
		res, err := r.gitCheckout(ctx, st, h)
		writeTrailer(st, res, err)
	case protocol.OpGitInspect:
		res, err := r.gitInspect(ctx, h)
		writeTrailer(st, res, err)
	case protocol.OpGitReconcile:
		res, err := r.gitReconcile(ctx, st, h)
		writeTrailer(st, res, err)
	case protocol.OpQuiesce:
		res, err := r.quiesce(ctx, h)
		writeTrailer(st, res, err)
	default:
		writeTrailer(st, nil, protocol.Errorf(protocol.CodeUnsupported, "operation %q is not supported by this runner", h.Op))
	}
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

func decodeArgs(h protocol.Header, v any) error {
	if len(h.Args) == 0 {
		return nil
	}
	if err := json.Unmarshal(h.Args, v); err != nil {
		return protocol.Errorf(protocol.CodeInvalidArgument, "%s arguments: %v", h.Op, err)
	}
	return nil
}
