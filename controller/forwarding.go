package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/protocol"
)

// Reaching what runs in a sandbox: the proxy, preview URLs and port-forward all come here for a
// connection. The runner dials inside the sandbox's own network (protocol.OpTCPDial), so a
// workspace on a private network is reached as well as one on the host's; the controller decides
// which ports that may be, and counts what each workspace has open.

// forwardedConn is a connection into a sandbox: closing it releases its slot in the workspace's
// connection limit.
type forwardedConn struct {
	net.Conn
	Grant  *forward.Grant
	closed sync.Once
	// bytes counts what passes both ways (metrics: proxy or port_forward); nil counts nothing.
	bytes prometheus.Counter
}

func (c *forwardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.count(n)
	return n, err
}

func (c *forwardedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.count(n)
	return n, err
}

func (c *forwardedConn) count(n int) {
	if n > 0 && c.bytes != nil {
		c.bytes.Add(float64(n))
	}
}

// A closed connection keeps its slot until the sandbox's side has ended too: the runner's stream
// is only half-closed by Close (yamux has no reset to send), so a slot given back at once would
// let streams pile up beyond the limit for as long as the runner keeps its half open. What still
// arrives is read and dropped, up to settleDrain within settleWait; past either, the slot goes
// anyway (an honest runner ends its half within 30 s of a stalled write, runner/forward.go).
const (
	settleWait  = 35 * time.Second
	settleDrain = 1 << 20
)

// CloseWrite half-closes the connection (the runner's stream sends its FIN) and keeps the slot:
// the answer may still be on its way.
func (c *forwardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	// A yamux stream's Close is its half-close.
	return c.Conn.Close()
}

func (c *forwardedConn) Close() error {
	var err error
	c.closed.Do(func() {
		err = c.Conn.Close()
		go c.settle()
	})
	return err
}

// settle releases the slot once the sandbox's side of the connection has ended (see settleWait).
func (c *forwardedConn) settle() {
	defer c.Grant.Release()
	_ = c.Conn.SetReadDeadline(time.Now().Add(settleWait))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, settleDrain))
}

// dialPort connects to port inside the workspace's sandbox for a client. The port must be one a
// service of the workspace was given, or one the operator allows in every workspace
// (ForwardPorts); the controller's own port never is. A service that is not ready is
// CodeUnavailable.
func (s *Server) dialPort(ctx context.Context, ws api.Workspace, port int) (*forwardedConn, error) {
	if err := s.portAllowed(ctx, ws, port); err != nil {
		return nil, err
	}
	return s.dialAllowed(ctx, ws, port)
}

// dialService connects to the named service of the workspace, which must be ready.
func (s *Server) dialService(ctx context.Context, ws api.Workspace, name string) (*forwardedConn, api.Service, error) {
	v, err := s.readyService(ctx, ws, name)
	if err != nil {
		return nil, v, err
	}
	c, err := s.dialAllowed(ctx, ws, v.Port)
	return c, v, err
}

// dialAllowed dials a port already allowed, counted against the workspace's limit.
func (s *Server) dialAllowed(ctx context.Context, ws api.Workspace, port int) (*forwardedConn, error) {
	if port == advertisedPort(s.advertise) && ws.Provider == "local" {
		// A local sandbox shares the host's loopback: its port is the controller's own.
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "port %d is the controller's own; nothing is forwarded there", port)
	}
	g, err := s.forwards.Acquire(ws.ID)
	if err != nil {
		return nil, err
	}
	// Read again: a pooled proxy transport dials with the workspace as it was when it was made.
	rc, err := s.runnerFor(ctx, ws.ID)
	if err != nil {
		g.Release()
		return nil, err
	}
	c, err := rc.Dial(ctx, port)
	if err != nil {
		g.Release()
		return nil, fmt.Errorf("workspace %s port %d: %w", ws.Name, port, err)
	}
	return &forwardedConn{Conn: c, Grant: g}, nil
}

// portAllowed says whether clients may reach port in the workspace: a port one of its services
// was given (ready), or one of the operator's ForwardPorts.
func (s *Server) portAllowed(ctx context.Context, ws api.Workspace, port int) error {
	if port < 1 || port > 65535 {
		return protocol.Errorf(protocol.CodeInvalidArgument, "port %d is out of range 1-65535", port)
	}
	if s.cfg.ForwardPorts.Contains(port) {
		return nil
	}
	list, err := s.store.ListServices(ctx, ws.ID)
	if err != nil {
		return err
	}
	for _, v := range list {
		if v.Port != port {
			continue
		}
		if v.State != protocol.ServiceReady {
			return protocol.Errorf(protocol.CodeUnavailable, "service %s on port %d is %s", v.Name, port, v.State)
		}
		return nil
	}
	return protocol.Errorf(protocol.CodeInvalidArgument,
		"port %d is not workspace %s's to reach: no service of it was given that port, and the controller forwards no other (tether serve --forward-ports)", port, ws.Name)
}

// readyService finds the workspace's service name, which must be ready on a port. The record is
// read, not the runner asked: a request through the proxy costs no extra round trip, the port is
// the one the controller allotted (never what a runner claims), and a service that died since
// its last report fails the dial as unavailable.
func (s *Server) readyService(ctx context.Context, ws api.Workspace, name string) (api.Service, error) {
	list, err := s.store.ListServices(ctx, ws.ID)
	if err != nil {
		return api.Service{}, err
	}
	for _, v := range list {
		if v.Name != name {
			continue
		}
		if v.State != protocol.ServiceReady || v.Port == 0 {
			return v, protocol.Errorf(protocol.CodeUnavailable, "service %s is %s%s; nothing to reach", v.Name, v.State, withPort(v.Port))
		}
		return v, nil
	}
	return api.Service{}, protocol.Errorf(protocol.CodeNotFound, "workspace %s has no service %q", ws.Name, name)
}
