package runner

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// dialWait bounds connecting to a port inside the sandbox: a loopback connect answers at once
// or not at all, unless the listener's backlog is full.
const dialWait = 10 * time.Second

// spliceBuffer is the copy buffer of each direction of a dialed connection.
const spliceBuffer = 64 << 10

// tcpDial connects the stream to a port on the sandbox's loopback and carries the connection's
// bytes both ways (protocol.OpTCPDial). Which ports may be reached is the controller's call; the
// runner only reaches its own network, where the agent's services listen.
func (r *Runner) tcpDial(ctx context.Context, st *yamux.Stream, args protocol.TCPDialArgs) {
	if args.Port < 1 || args.Port > 65535 {
		writeTrailer(st, nil, protocol.Errorf(protocol.CodeInvalidArgument, "port %d is out of range 1-65535", args.Port))
		return
	}
	conn, err := dialLoopback(ctx, args.Port)
	if err != nil {
		writeTrailer(st, nil, err)
		return
	}
	defer conn.Close()
	writeTrailer(st, protocol.TCPDialReply{Addr: conn.RemoteAddr().String()}, nil)
	splice(ctx, st, conn)
}

// dialLoopback connects to port on 127.0.0.1, or on ::1 when nothing accepts there (a server
// bound to the IPv6 loopback only).
func dialLoopback(ctx context.Context, port int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: dialWait}
	var errs []error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		errs = append(errs, err)
	}
	return nil, protocol.Errorf(protocol.CodeUnavailable, "nothing accepts connections on port %d in the sandbox: %v", port, errors.Join(errs...))
}

// halfClosedStall bounds how long the sandbox's side may go on sending to a controller that
// closed its half and stopped reading: yamux has no reset, so a controller that cut the
// connection only half-closes the stream, and without this the copy would block on a full window
// until yamux's close timeout (minutes), holding the sandbox's connection.
const halfClosedStall = 30 * time.Second

// splice copies both ways until both halves are closed. A half that ends cleanly half-closes the
// other side (a FIN either way), so protocols that shut down their writing half work; a half
// that fails cuts the whole connection.
func splice(ctx context.Context, st *yamux.Stream, conn *net.TCPConn) {
	cut := func() {
		_ = conn.Close()
		_ = st.Close()
		// A read blocked on the stream waits for the controller's FIN otherwise.
		_ = st.SetReadDeadline(time.Now())
	}
	stop := context.AfterFunc(ctx, cut)
	defer stop()
	var controllerClosed atomic.Bool
	inbound := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(conn, st, make([]byte, spliceBuffer))
		if err == nil {
			controllerClosed.Store(true)
			// A write already blocked on a full window takes the bound too (yamux wakes it).
			_ = st.SetWriteDeadline(time.Now().Add(halfClosedStall))
			err = conn.CloseWrite()
		}
		inbound <- err
	}()
	err := copyOut(st, conn, &controllerClosed)
	if err != nil {
		cut()
	} else {
		_ = st.Close()
	}
	if err := <-inbound; err != nil {
		cut()
	}
}

// copyOut copies the sandbox's side to the stream; once the controller has closed its half, each
// write must make progress within halfClosedStall.
func copyOut(st *yamux.Stream, conn *net.TCPConn, controllerClosed *atomic.Bool) error {
	buf := make([]byte, spliceBuffer)
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if controllerClosed.Load() {
				_ = st.SetWriteDeadline(time.Now().Add(halfClosedStall))
			}
			if _, err := st.Write(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
