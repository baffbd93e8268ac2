package hub

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// DialWait bounds the runner's answer to a dial: its own connect is bounded at 10 s.
const DialWait = 15 * time.Second

// Dial connects to a TCP port inside the sandbox through the runner (protocol.OpTCPDial). The
// connection is the operation's stream: Close half-closes it (the peer sees EOF, and the stream
// ends once the sandbox side closes too), CloseWrite does the same. Which ports may be reached is
// the caller's to decide before it dials.
func (c *Conn) Dial(ctx context.Context, port int) (net.Conn, error) {
	st, err := c.Open(protocol.OpTCPDial, "", 0, protocol.TCPDialArgs{Port: port})
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() {
		_ = st.SetReadDeadline(time.Now()) // the wait for the answer ends now
		st.Close()
	})
	_ = st.SetReadDeadline(time.Now().Add(DialWait))
	tr, err := ReadTrailer(st)
	if !stop() {
		st.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, ctx.Err())
	}
	if err == nil {
		err = dialRefusal(DecodeResult(tr, nil))
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	_ = st.SetReadDeadline(time.Time{})
	return st, nil
}

// dialRefusal keeps a runner's refusal of a dial to the codes a dial can have: the runner is
// untrusted, and what it says reaches clients (a preview page among them), so another code
// (unauthorized, revoked, …) becomes unavailable, its message kept as the runner's words.
func dialRefusal(err error) error {
	switch protocol.CodeOf(err) {
	case protocol.CodeUnavailable, protocol.CodeInvalidArgument, protocol.CodeUnsupported, protocol.CodeTimeout:
		return err
	}
	if err == nil {
		return nil
	}
	return protocol.Errorf(protocol.CodeUnavailable, "the runner refused the connection: %s", protocol.AsError(err).Message)
}
