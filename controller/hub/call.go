package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// TrailerWait bounds how long the controller waits for a runner's answer once everything was
// sent (a large write's final fsync, a recursive remove).
const TrailerWait = 10 * time.Minute

// Call runs an operation without a body and decodes its result into out.
func (c *Conn) Call(ctx context.Context, op string, epoch uint64, args, out any) error {
	st, err := c.Open(op, "", epoch, args)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	_ = st.SetReadDeadline(time.Now().Add(TrailerWait))
	tr, err := ReadTrailer(st)
	if err != nil {
		return err
	}
	return DecodeResult(tr, out)
}

// ReadTrailer reads an operation's trailer, the runner's answer; failing to read one is
// CodeUnavailable.
func ReadTrailer(st *yamux.Stream) (protocol.Trailer, error) {
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		return tr, protocol.Errorf(protocol.CodeUnavailable, "no answer from the runner: %v", err)
	}
	return tr, nil
}

// DecodeResult returns the trailer's error, or decodes its result into out (when both are set).
func DecodeResult(tr protocol.Trailer, out any) error {
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

// CallWithBody runs an operation whose body is src and decodes its result into out. The runner
// may answer before the body is complete (it refused the operation); then sending stops at once
// instead of pushing the rest of a large upload at a peer that no longer reads.
func (c *Conn) CallWithBody(ctx context.Context, op string, epoch uint64, args any, src io.Reader, out any) error {
	return c.CallWithBodyClaim(ctx, op, epoch, args, src, nil, out)
}

// CallWithBodyClaim is CallWithBody whose body ends with claim's answer as the sender's
// SHA-256 (BodySum.SHA256), asked once src is read to its end: a client's digest that arrives
// after its bytes (an HTTP trailer). An error from claim aborts the body instead.
func (c *Conn) CallWithBodyClaim(ctx context.Context, op string, epoch uint64, args any, src io.Reader, claim func() (string, error), out any) error {
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
		tr, err := ReadTrailer(st)
		answered <- answer{tr, err}
	}()
	sent := make(chan error, 1)
	go func() {
		body := protocol.NewBodyWriter(st)
		_, err := io.Copy(body, src)
		var sum string
		if err == nil && claim != nil {
			sum, err = claim()
		}
		if err == nil {
			_, err = body.FinishClaiming(sum)
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
		return DecodeResult(a.tr, out)
	case err := <-sent:
		timer := time.NewTimer(TrailerWait)
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
			return DecodeResult(a.tr, out)
		case <-timer.C:
			return protocol.Errorf(protocol.CodeTimeout, "runner did not answer within %s", TrailerWait)
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", op, ctx.Err())
		}
	}
}

// OpenAnswered opens a streaming op and reads the runner's first answer into first: its typed
// error as the error, no answer within idle as unavailable. The stream is closed when ctx ends
// or when the caller calls done; what follows the answer (a body, a final trailer) is the
// caller's to read.
func (c *Conn) OpenAnswered(ctx context.Context, op string, args any, idle time.Duration, first any) (st *yamux.Stream, done func(), err error) {
	if st, err = c.Open(op, "", 0, args); err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	done = func() { stop(); st.Close() }
	var reply protocol.Trailer
	if err := protocol.ReadJSON(IdleReader{St: st, Idle: idle}, &reply); err != nil {
		done()
		return nil, nil, protocol.Errorf(protocol.CodeUnavailable, "no answer from the runner: %v", err)
	}
	if err := DecodeResult(reply, first); err != nil {
		done()
		return nil, nil, err
	}
	return st, done, nil
}
