package peer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// TunnelPath is where a controller serves tunnels to the runners it holds.
func TunnelPath(allocationID string) string {
	return "/internal/v1/allocations/" + url.PathEscape(allocationID) + "/tunnel"
}

// tunnelHello is the owner's first message on a tunnel: what the caller's hub.Conn needs to know
// of the runner (the hello it gave its owner).
type tunnelHello struct {
	WorkspaceID string         `json:"workspace_id"`
	Protocol    int            `json:"protocol"`
	Hello       protocol.Hello `json:"hello"`
}

// maxTunnelHello bounds the owner's first message (a runner's hello is bounded by its owner at
// 1 MiB; the rest is a few fields).
const maxTunnelHello = 2 << 20

// handshakeWait bounds dialing a peer and reading its first message.
const handshakeWait = 10 * time.Second

var upgrader = websocket.Upgrader{
	ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10, EnableCompression: false,
	// Peers are controllers carrying the cluster secret, not browsers.
	CheckOrigin: func(*http.Request) bool { return true },
}

// Dial opens a tunnel to the runner of allocationID that the controller at base
// (http://host:port) holds. auth sets the peer credentials (Authorize). The connection it
// returns behaves as the runner's own: operations opened on it reach the runner through the
// owner, and it ends when the owner's connection to the runner does.
func Dial(ctx context.Context, base, allocationID string, auth func(http.Header)) (*hub.Conn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "peer address %q: %v", base, err)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + TunnelPath(allocationID)
	h := http.Header{}
	auth(h)
	ctx, cancel := context.WithTimeout(ctx, handshakeWait)
	defer cancel()
	d := websocket.Dialer{HandshakeTimeout: handshakeWait, ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	ws, resp, err := d.DialContext(ctx, u.String(), h)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, answerError(resp, base)
		}
		return nil, protocol.Errorf(protocol.CodeUnavailable, "controller at %s holds the runner but cannot be reached: %v", base, err)
	}
	th, err := readHello(ctx, ws)
	if err != nil {
		ws.Close()
		return nil, protocol.Errorf(protocol.CodeUnavailable, "tunnel to controller at %s: %v", base, err)
	}
	sess, err := protocol.MuxClient(protocol.NewWSConn(ws))
	if err != nil {
		ws.Close()
		return nil, protocol.Errorf(protocol.CodeUnavailable, "tunnel to controller at %s: %v", base, err)
	}
	return hub.NewConn(sess, allocationID, th.WorkspaceID, th.Hello, th.Protocol), nil
}

// answerError is the typed error of a refused tunnel: the owner's own error when it sent one
// (bounded), unavailable otherwise.
func answerError(resp *http.Response, base string) error {
	defer resp.Body.Close()
	var body api.ErrorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err == nil && body.Error.Code != "" {
		e := body.Error
		return &e
	}
	return protocol.Errorf(protocol.CodeUnavailable, "controller at %s refused the tunnel: %s", base, resp.Status)
}

func readHello(ctx context.Context, ws *websocket.Conn) (tunnelHello, error) {
	var th tunnelHello
	deadline, _ := ctx.Deadline()
	_ = ws.SetReadDeadline(deadline)
	ws.SetReadLimit(maxTunnelHello)
	typ, msg, err := ws.ReadMessage()
	if err != nil {
		return th, err
	}
	if typ != websocket.TextMessage {
		return th, errors.New("the owner's first message is not its runner's hello")
	}
	if err := json.Unmarshal(msg, &th); err != nil {
		return th, err
	}
	// NewWSConn sets its own limit and read deadline.
	return th, nil
}

// Serve answers a tunnel request (Dial) for c, the runner connection this controller holds: it
// sends the runner's hello, then splices every stream the peer opens onto a new stream of the
// runner's session, until the peer hangs up or the runner's connection ends.
func Serve(w http.ResponseWriter, r *http.Request, c *hub.Conn, log *slog.Logger) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade answered
	}
	first, err := json.Marshal(tunnelHello{WorkspaceID: c.WorkspaceID, Protocol: c.Protocol, Hello: c.Hello})
	if err == nil {
		_ = ws.SetWriteDeadline(time.Now().Add(handshakeWait))
		err = ws.WriteMessage(websocket.TextMessage, first)
		_ = ws.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		ws.Close()
		return
	}
	conn := protocol.NewWSConn(ws)
	defer conn.Close()
	sess, err := yamux.Server(conn, protocol.MuxConfig())
	if err != nil {
		return
	}
	defer sess.Close()
	// The tunnel lives as long as the runner's connection: once that ends, the peer's next
	// operation finds the tunnel closed and asks the store where the runner went.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-c.Done():
			sess.Close()
		case <-stop:
		}
	}()
	var splices sync.WaitGroup
	defer splices.Wait()
	for {
		in, err := sess.AcceptStream()
		if err != nil {
			return
		}
		out, err := c.OpenStream()
		if err != nil {
			log.Info("tunnel: the runner refused a stream", "allocation", c.AllocationID, "err", err)
			in.Close()
			continue
		}
		splices.Add(2)
		go pipe(&splices, out, in)
		go pipe(&splices, in, out)
	}
}

// pipe copies src to dst and then half-closes dst (yamux's Close sends FIN: the other direction
// goes on), as the runner and the caller end their halves of an operation. A failed copy closes
// both streams: the operation is cut, and each end sees its stream end.
func pipe(wg *sync.WaitGroup, dst, src *yamux.Stream) {
	defer wg.Done()
	if _, err := io.Copy(dst, src); err != nil {
		src.Close()
	}
	dst.Close()
}
