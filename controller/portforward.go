package controller

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/protocol"
)

// switchingProtocols is the controller's whole answer to an accepted port-forward upgrade.
const switchingProtocols = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.UpgradeTCP + "\r\n\r\n"

// handleConnectPort carries one client connection to a port inside the workspace's sandbox
// (GET /v1/workspaces/{id}/ports/{port}/connect, tether port-forward).
func (s *Server) handleConnectPort(w http.ResponseWriter, r *http.Request) {
	s.connect(w, r, func(ctx context.Context, ws api.Workspace) (*forwardedConn, error) {
		port, err := forward.ParsePort(r.PathValue("port"))
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "%v", err)
		}
		return s.dialPort(ctx, ws, port)
	})
}

// handleConnectService is handleConnectPort for a service by name
// (GET /v1/workspaces/{id}/services/{name}/connect): its port as the controller allotted it.
func (s *Server) handleConnectService(w http.ResponseWriter, r *http.Request) {
	s.connect(w, r, func(ctx context.Context, ws api.Workspace) (*forwardedConn, error) {
		c, _, err := s.dialService(ctx, ws, r.PathValue("name"))
		return c, err
	})
}

// connect dials into the sandbox before it answers, so every refusal (a port not the
// workspace's, a stopped service, nothing listening, the workspace's connection limit, the
// runner away) is an ordinary typed JSON error, and a 101 means the connection is made. The
// HTTP connection is then hijacked and joined to the dialed one until both ends closed; the
// request stays counted for drain (every /v1/ request is) while it lasts.
//
// The bytes are not framed: a raw upgrade costs nothing per byte beyond the copy, and a reverse
// proxy that knows Upgrade (net/http's, HAProxy) carries it as it carries a websocket.
// Backpressure is end to end: each direction copies one buffer at a time, the runner's stream
// has a bounded yamux window, so a client that stops reading stalls the runner's reads of the
// sandbox's socket instead of filling the controller's memory.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, dial func(context.Context, api.Workspace) (*forwardedConn, error)) {
	if !upgradeAsked(r.Header, api.UpgradeTCP) {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument,
			"a connection into the sandbox is an HTTP upgrade: send Connection: Upgrade and Upgrade: %s", api.UpgradeTCP))
		return
	}
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	dctx, cancel := context.WithTimeout(r.Context(), dialWait)
	up, err := dial(dctx, ws)
	cancel()
	if err != nil {
		writeError(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		writeError(w, protocol.Errorf(protocol.CodeInternal, "the HTTP connection cannot be taken over"))
		return
	}
	raw, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	// The server's header deadline is not ours: a forwarded connection may idle for hours.
	_ = raw.SetDeadline(time.Time{})
	if _, err := raw.Write([]byte(switchingProtocols)); err != nil {
		raw.Close()
		up.Close()
		return
	}
	s.log.Debug("port-forward", "workspace", ws.ID, "remote", raw.RemoteAddr().String())
	up.bytes = s.metrics.BytesCounter(metrics.KindPortForward)
	forward.Join(r.Context(), &hijackedConn{Conn: raw, r: brw.Reader}, up, up.Grant)
}

// dialWait bounds the dial before the upgrade is answered: reaching the runner, and its own
// connect inside the sandbox.
const dialWait = 20 * time.Second

// upgradeAsked says whether h asks to upgrade to token (Connection: Upgrade, Upgrade: token).
func upgradeAsked(h http.Header, token string) bool {
	return headerHasToken(h, "Connection", "upgrade") && headerHasToken(h, "Upgrade", token)
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// hijackedConn is a client's connection after the upgrade: bytes the client sent right behind
// its request may already sit in the server's reader, so reads go through it; its writing half
// closes alone, as the TCP connection under it does.
type hijackedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *hijackedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *hijackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
