package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/protocol"
)

// reconnectWait bounds how long a connection accepted while the workspace's runner is away (its
// socket dropped, it is reconnecting) waits for it before it is given up.
const reconnectWait = 30 * time.Second

// The waits between dial attempts while the runner is away grow from dialRetryFirst, doubling,
// up to dialRetryMax.
const (
	dialRetryFirst = 100 * time.Millisecond
	dialRetryMax   = 2 * time.Second
)

// portMapping is one LOCAL:REMOTE argument of port-forward.
type portMapping struct {
	local, remote int // local 0: any free port
}

// parsePortMapping reads REMOTE (the same port locally), :REMOTE or 0:REMOTE (any free local
// port) or LOCAL:REMOTE, as kubectl port-forward does.
func parsePortMapping(s string) (portMapping, error) {
	parts := strings.Split(s, ":")
	bad := func(err error) (portMapping, error) {
		return portMapping{}, usageError{fmt.Errorf("port mapping %q: %v; want [LOCAL:]REMOTE", s, err)}
	}
	switch len(parts) {
	case 1:
		p, err := forward.ParsePort(parts[0])
		if err != nil {
			return bad(err)
		}
		return portMapping{local: p, remote: p}, nil
	case 2:
		remote, err := forward.ParsePort(parts[1])
		if err != nil {
			return bad(err)
		}
		local := 0
		if l := parts[0]; l != "" && l != "0" {
			if local, err = forward.ParsePort(l); err != nil {
				return bad(err)
			}
		}
		return portMapping{local: local, remote: remote}, nil
	}
	return bad(errors.New("more than one colon"))
}

func newPortForwardCmd(c *cli) *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward ID [LOCAL:]REMOTE...",
		Short: "Forward local ports to ports inside a workspace's sandbox, through the controller",
		Long: `Listen on local ports and carry each connection to a port inside the workspace's sandbox,
through the controller and the workspace's runner: the sandbox's own network is reached, so a
service bound to 127.0.0.1 in a container on a private network answers.

REMOTE must be a port of one of the workspace's ready services, or one the controller forwards
to every workspace (tether serve --forward-ports). REMOTE alone listens on the same port locally;
:REMOTE or 0:REMOTE on any free port. "Forwarding from ADDR -> REMOTE" is printed on stdout for
each mapping, "Handling connection for REMOTE" on stderr for each connection. A connection
accepted while the runner is away waits for it to reconnect (up to 30s); a refused one is said on
stderr and closed, and the listener stays up. Ctrl-C stops forwarding.`,
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) < 2 {
				return usageError{fmt.Errorf("usage: tether port-forward ID [LOCAL:]REMOTE [...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			var maps []portMapping
			for _, s := range a[1:] {
				m, err := parsePortMapping(s)
				if err != nil {
					return err
				}
				maps = append(maps, m)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			// A workspace that does not exist is said before anything listens.
			ws, err := cl.GetWorkspace(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			pf := &portForward{cl: cl, ws: ws.ID, stderr: c.stderr}
			return pf.run(cmd.Context(), c.stdout, strings.Split(address, ","), maps)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "local addresses to listen on, comma-separated")
	c.addWakeFlag(cmd, false)
	return cmd
}

// portForward serves the listeners of one port-forward command.
type portForward struct {
	cl     *client.Client
	ws     string
	stderr io.Writer
	mu     sync.Mutex // serializes stderr lines
}

func (pf *portForward) say(format string, args ...any) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	fmt.Fprintf(pf.stderr, format+"\n", args...)
}

// run listens on every address and mapping (all or none), then forwards until ctx ends, when
// the listeners close and the connections are cut; ending that way is a success.
func (pf *portForward) run(ctx context.Context, stdout io.Writer, addrs []string, maps []portMapping) error {
	type listener struct {
		net.Listener
		remote int
	}
	var ls []listener
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	for _, m := range maps {
		for _, addr := range addrs {
			l, err := net.Listen("tcp", net.JoinHostPort(strings.TrimSpace(addr), strconv.Itoa(m.local)))
			if err != nil {
				closeAll()
				return protocol.Errorf(protocol.CodeUnavailable, "listen for port %d: %v", m.remote, err)
			}
			ls = append(ls, listener{l, m.remote})
		}
	}
	for _, l := range ls {
		fmt.Fprintf(stdout, "Forwarding from %s -> %d\n", l.Addr(), l.remote)
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer stop()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() { pf.accept(ctx, l.Listener, l.remote) })
	}
	wg.Wait()
	closeAll()
	if ctx.Err() != nil {
		return nil
	}
	return protocol.Errorf(protocol.CodeInternal, "the listeners stopped")
}

// accept serves one listener until it closes.
func (pf *portForward) accept(ctx context.Context, l net.Listener, remote int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		local, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				pf.say("error: accept on %s: %v", l.Addr(), err)
			}
			return
		}
		wg.Go(func() { pf.handle(ctx, local, remote) })
	}
}

// handle carries one local connection to remote inside the sandbox.
func (pf *portForward) handle(ctx context.Context, local net.Conn, remote int) {
	pf.say("Handling connection for %d", remote)
	up, err := pf.dial(ctx, remote)
	if err != nil {
		local.Close()
		if ctx.Err() == nil {
			pf.say("error: forwarding to port %d: %s", remote, protocol.AsError(err).Error())
		}
		return
	}
	forward.Join(ctx, local, up, nil)
}

// dial connects to remote through the controller. A refusal while the runner is away (its
// socket dropped; it reconnects) or the controller cannot be reached is waited out, for
// reconnectWait at most, so a connection made during a runner's reconnect still succeeds; every
// other refusal (a port not the workspace's, a stopped service, the connection limit) is final.
func (pf *portForward) dial(ctx context.Context, remote int) (net.Conn, error) {
	deadline := time.Now().Add(reconnectWait)
	delay := dialRetryFirst
	connectedRefusals := 0
	said := false
	for {
		up, err := pf.cl.DialPort(ctx, pf.ws, remote)
		if err == nil || protocol.CodeOf(err) != protocol.CodeUnavailable || ctx.Err() != nil {
			return up, err
		}
		ws, werr := pf.cl.GetWorkspace(ctx, pf.ws)
		switch {
		case werr == nil && ws.Connected:
			// The runner is there, so the refusal is the port's own (nothing listening, a stopped
			// service, the limit): once more only, in case the runner's socket dropped just
			// before the refusal and the controller has not noticed yet.
			connectedRefusals++
			if connectedRefusals > 1 {
				return nil, err
			}
		case werr != nil && protocol.CodeOf(werr) != protocol.CodeUnavailable:
			return nil, err
		default:
			// The runner (or the controller) is away: wait for it.
			connectedRefusals = 0
			if !said {
				pf.say("waiting for workspace %s's runner to reconnect (up to %s): %s", pf.ws, reconnectWait, protocol.AsError(err).Message)
				said = true
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		delay = min(2*delay, dialRetryMax)
	}
}
