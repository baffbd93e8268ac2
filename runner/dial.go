package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/protocol"
)

// controllerDial is how the runner reaches the controller: the websocket URL it dials and,
// for a controller on a unix socket (TETHER_CONTROLLER_URL=unix:///PATH/TO/SOCKET), the
// socket's directory, held open from the start.
//
// The directory is opened before the runner confines itself (Run): a root runner in a container
// then takes its file access down to the agent's uid, and the socket's ancestors (/run/tether,
// 0700 root) are closed to that uid on purpose, so the agent cannot reach the socket. The runner
// reaches it through /proc/self/fd/N/NAME instead: the magic link stands for the directory
// itself, so only the directory's own permission (0711) is checked, not its ancestors'.
type controllerDial struct {
	url   string // ws(s):// URL of the connect endpoint
	dirFD int    // the socket's directory (O_PATH), -1 for TCP
	name  string // the socket's name in it
}

// newControllerDial parses the controller URL: http(s) or ws(s) for TCP (connectURL),
// unix:///ABS/PATH for a socket, whose directory it opens now.
func newControllerDial(base string) (*controllerDial, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("controller URL %q: %v", base, err)
	}
	if u.Scheme == "unix" {
		p := u.Path
		if u.Host != "" || !path.IsAbs(p) || path.Clean(p) != p || path.Base(p) == "/" {
			return nil, fmt.Errorf("controller URL %q: want unix:///ABSOLUTE/PATH/TO/SOCKET", base)
		}
		fd, err := unix.Open(path.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("controller socket directory %s: %w", path.Dir(p), err)
		}
		// The host part is never dialed: the connection is the socket.
		return &controllerDial{url: "ws://controller" + protocol.ConnectPath, dirFD: fd, name: path.Base(p)}, nil
	}
	ws, err := connectURL(base)
	if err != nil {
		return nil, err
	}
	return &controllerDial{url: ws, dirFD: -1}, nil
}

// socketPath names the socket through the held directory descriptor.
func (d *controllerDial) socketPath() string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.dirFD, d.name)
}

// dialer is the websocket dialer for one connection attempt. A socket is never proxied.
func (d *controllerDial) dialer() *websocket.Dialer {
	w := &websocket.Dialer{HandshakeTimeout: 10 * time.Second, EnableCompression: false,
		ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10, Proxy: http.ProxyFromEnvironment}
	if d.dirFD >= 0 {
		w.Proxy = nil
		w.NetDialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", d.socketPath())
		}
	}
	return w
}
