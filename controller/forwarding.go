package controller

import (
	"context"
	"fmt"
	"net"

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
	Grant *forward.Grant
}

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
	err := c.Conn.Close()
	c.Grant.Release()
	return err
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
	// ws was read for this request: its state is checked here rather than read again.
	if ws.State != api.StateReady {
		g.Release()
		return nil, protocol.Errorf(protocol.CodeConflict, "workspace %s is %s", ws.Name, ws.State)
	}
	rc, err := s.reach(ctx, ws.AllocationID)
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
