package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// trailerWait bounds how long the controller waits for a runner's answer once everything was
// sent (a large write's final fsync, a recursive remove).
const trailerWait = 10 * time.Minute

// runnerFor finds the connected runner of a ready workspace.
func (s *Server) runnerFor(ctx context.Context, idOrName string) (*hub.Conn, error) {
	ws, err := s.liveConn(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	c, ok := s.hub.Get(ws.AllocationID)
	if !ok {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "the runner of workspace %s is not connected", ws.ID)
	}
	return c, nil
}

// call runs an operation without a body and decodes its result into out.
func call(ctx context.Context, c *hub.Conn, op string, epoch uint64, args, out any) error {
	st, err := c.Open(op, "", epoch, args)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	_ = st.SetReadDeadline(time.Now().Add(trailerWait))
	tr, err := readTrailer(st)
	if err != nil {
		return err
	}
	return decodeResult(tr, out)
}

func readTrailer(st *yamux.Stream) (protocol.Trailer, error) {
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		return tr, protocol.Errorf(protocol.CodeUnavailable, "no answer from the runner: %v", err)
	}
	return tr, nil
}

func decodeResult(tr protocol.Trailer, out any) error {
	if err := tr.Err(); err != nil {
		return err
	}
	if out == nil || len(tr.Result) == 0 {
		return nil
	}
	if err := json.Unmarshal(tr.Result, out); err != nil {
		return protocol.Errorf(protocol.CodeInternal, "runner result: %v", err)
	}
	return nil
}

// callWithBody runs an operation whose body is src and decodes its result into out. The runner
// may answer before the body is complete (it refused the operation); then sending stops at once
// instead of pushing the rest of a large upload at a peer that no longer reads.
func callWithBody(ctx context.Context, c *hub.Conn, op string, epoch uint64, args any, src io.Reader, out any) error {
	st, err := c.Open(op, "", epoch, args)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()

	type answer struct {
		tr  protocol.Trailer
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		tr, err := readTrailer(st)
		answered <- answer{tr, err}
	}()
	sent := make(chan error, 1)
	go func() {
		body := protocol.NewBodyWriter(st)
		_, err := io.Copy(body, src)
		if err == nil {
			_, err = body.Finish()
		}
		if err != nil {
			// The body ends as failed, with the reason when it is ours (the source failed a
			// check) — never with a terminator: the runner publishes nothing.
			_ = body.Abort(err)
			st.Close()
		}
		sent <- err
	}()
	select {
	case a := <-answered:
		// Early answer, or the answer after a complete body. A send still in progress is
		// stopped by closing; one blocked reading src ends when the request does.
		st.Close()
		if a.err != nil {
			return a.err
		}
		return decodeResult(a.tr, out)
	case err := <-sent:
		timer := time.NewTimer(trailerWait)
		defer timer.Stop()
		select {
		case a := <-answered:
			if err != nil {
				// The source failing is the cause; the runner only saw the body end.
				if protocol.CodeOf(err) != protocol.CodeInternal {
					return err
				}
				return protocol.Errorf(protocol.CodeFailed, "upload interrupted: %v", err)
			}
			if a.err == nil && a.tr.Err() != nil {
				return a.tr.Err()
			}
			if a.err != nil {
				return a.err
			}
			return decodeResult(a.tr, out)
		case <-timer.C:
			return protocol.Errorf(protocol.CodeTimeout, "runner did not answer within %s", trailerWait)
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", op, ctx.Err())
		}
	}
}
