package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// DialPort connects to a TCP port inside the workspace's sandbox through the controller and the
// runner (tether port-forward). The port must be one of the workspace's services' or one the
// controller forwards to every workspace; refusals are typed (invalid_argument for a port that is
// not the workspace's, unavailable for a stopped service, nothing listening, the workspace's
// connection limit, or its runner away). The connection's CloseWrite half-closes it through to
// the sandbox. It is made once: what to retry is the caller's call.
func (c *Client) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return c.dialUpgrade(ctx, "/v1/workspaces/"+url.PathEscape(id)+"/ports/"+strconv.Itoa(port)+"/connect")
}

// DialService is DialPort for the workspace's service name (which must be ready).
func (c *Client) DialService(ctx context.Context, id, name string) (net.Conn, error) {
	return c.dialUpgrade(ctx, "/v1/workspaces/"+url.PathEscape(id)+"/services/"+url.PathEscape(name)+"/connect")
}

// handshakeWait bounds the upgrade's answer: the controller dials into the sandbox first.
const handshakeWait = 30 * time.Second

// dialUpgrade sends the upgrade request on a connection of its own (not the HTTP client's pool:
// the connection is the caller's afterwards, and its TCP half-close must stay reachable) and
// reads the answer: 101, or the controller's typed refusal.
func (c *Client) dialUpgrade(ctx context.Context, path string) (net.Conn, error) {
	req, err := c.newRequest(ctx, request{method: http.MethodGet, path: path}, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.UpgradeTCP)
	conn, err := c.dialController(ctx)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	_ = conn.SetDeadline(time.Now().Add(handshakeWait))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if err := req.Write(conn); err != nil {
		return nil, c.handshakeError(ctx, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, c.handshakeError(ctx, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil, protocol.Errorf(protocol.CodeInternal, "controller answered %s to an upgrade", resp.Status)
		}
		return nil, decodeError(resp)
	}
	if resp.Header.Get("Upgrade") != api.UpgradeTCP {
		return nil, protocol.Errorf(protocol.CodeInternal, "controller upgraded to %q, not %s", resp.Header.Get("Upgrade"), api.UpgradeTCP)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = conn.SetDeadline(time.Time{})
	ok = true
	return &upgradedConn{Conn: conn, r: br}, nil
}

func (c *Client) handshakeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return protocol.Errorf(protocol.CodeUnavailable, "connect through the controller at %s: %v", c.base, err)
}

// dialController opens a TCP (or TLS, for https) connection to the controller.
func (c *Client) dialController(ctx context.Context) (net.Conn, error) {
	host := c.base.Host
	if c.base.Port() == "" {
		port := "80"
		if c.base.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(c.base.Hostname(), port)
	}
	if c.base.Scheme == "https" {
		d := tls.Dialer{Config: &tls.Config{ServerName: c.base.Hostname(), MinVersion: tls.VersionTLS12}}
		return d.DialContext(ctx, "tcp", host)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", host)
}

// upgradedConn is the connection after the 101: the reader may hold bytes the controller sent
// right behind its answer.
type upgradedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *upgradedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection (TCP or TLS): the sandbox's side reads EOF while the
// answer still comes back.
func (c *upgradedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
