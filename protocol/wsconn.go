package protocol

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Keepalive timing for runner sockets. A runner behind a NAT or in a cloud sandbox must notice a
// dead controller (and vice versa) within a bounded time, so both ends ping and expect a pong.
const (
	PingInterval = 10 * time.Second
	PongWait     = 30 * time.Second
	writeWait    = 10 * time.Second
)

// ReadLimit bounds one websocket message. yamux writes at most one stream window of data per
// frame, so the limit is the window plus headroom.
const ReadLimit = StreamWindow + 64<<10

// WSConn adapts a websocket to net.Conn so yamux can run over it. All data writes go through one
// writer goroutine (gorilla allows one concurrent writer); pings share it.
type WSConn struct {
	ws     *websocket.Conn
	reader io.Reader

	writes    chan wsWrite
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

type wsWrite struct {
	p    []byte
	done chan error
}

// NewWSConn wraps ws. Compression must already be off for ws: payloads are zstd or small frames.
func NewWSConn(ws *websocket.Conn) *WSConn {
	c := &WSConn{ws: ws, writes: make(chan wsWrite), closed: make(chan struct{})}
	ws.SetReadLimit(ReadLimit)
	_ = ws.SetReadDeadline(time.Now().Add(PongWait))
	ws.SetPongHandler(func(string) error {
		return ws.SetReadDeadline(time.Now().Add(PongWait))
	})
	ws.SetPingHandler(func(data string) error {
		_ = ws.SetReadDeadline(time.Now().Add(PongWait))
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	go c.writeLoop()
	return c
}

func (c *WSConn) writeLoop() {
	ping := time.NewTicker(PingInterval)
	defer ping.Stop()
	for {
		select {
		case w := <-c.writes:
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			err := c.ws.WriteMessage(websocket.BinaryMessage, w.p)
			w.done <- err
			if err != nil {
				c.Close()
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				c.Close()
				return
			}
		case <-c.closed:
			return
		}
	}
}

func (c *WSConn) Read(p []byte) (int, error) {
	for {
		if c.reader == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				c.Close()
				return 0, io.EOF
			}
			if typ != websocket.BinaryMessage {
				continue
			}
			c.reader = r
		}
		n, err := c.reader.Read(p)
		if err == io.EOF {
			c.reader = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		if n > 0 {
			// Data is as good as a pong: a busy peer may delay its pongs behind a long stream.
			_ = c.ws.SetReadDeadline(time.Now().Add(PongWait))
		}
		return n, err
	}
}

func (c *WSConn) Write(p []byte) (int, error) {
	// The writer goroutine sends p before answering, so p need not be copied.
	w := wsWrite{p: p, done: make(chan error, 1)}
	select {
	case c.writes <- w:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	select {
	case err := <-w.done:
		if err != nil {
			return 0, err
		}
		return len(p), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

// Close sends a close frame (best effort) and closes the socket.
func (c *WSConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		c.closeErr = c.ws.Close()
	})
	return c.closeErr
}

// Done is closed once the connection is closed, by either side.
func (c *WSConn) Done() <-chan struct{} { return c.closed }

func (c *WSConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *WSConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

// Deadlines are managed by the keepalive above; yamux keeps its own per-stream timers.
func (c *WSConn) SetDeadline(time.Time) error      { return nil }
func (c *WSConn) SetReadDeadline(time.Time) error  { return nil }
func (c *WSConn) SetWriteDeadline(time.Time) error { return nil }
