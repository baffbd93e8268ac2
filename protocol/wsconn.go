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

	errMu    sync.Mutex
	asyncErr error // a failed send of a write nobody waited for; later writes report it
}

type wsWrite struct {
	p    []byte
	done chan error
}

// NewWSConn wraps ws. Compression must already be off for ws: payloads are zstd or small frames.
func NewWSConn(ws *websocket.Conn) *WSConn {
	c := &WSConn{ws: ws, writes: make(chan wsWrite, 16), closed: make(chan struct{})}
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
			if w.p == nil && w.done != nil { // a flush: everything queued before it is sent
				w.done <- nil
				continue
			}
			if err := c.writeMessage(w); err != nil {
				c.closeNow()
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				c.closeNow()
				return
			}
		case <-c.closed:
			return
		}
	}
}

// writeMessage sends w, and writes queued right behind it, as one websocket message. yamux
// writes each frame as a 12-byte header and then its body; sending them together halves the
// messages (and syscalls) per frame. A message ends with the first write someone waits for.
func (c *WSConn) writeMessage(w wsWrite) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	mw, err := c.ws.NextWriter(websocket.BinaryMessage)
	var waiting []chan error
	for {
		if err == nil {
			_, err = mw.Write(w.p)
		}
		if w.done != nil {
			waiting = append(waiting, w.done)
			break
		}
		next, more := c.queued()
		if !more {
			break
		}
		w = next
	}
	if mw != nil {
		if cerr := mw.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		c.failAsync(err)
	}
	for _, d := range waiting {
		d <- err
	}
	return err
}

// queued returns a write already waiting, without blocking.
func (c *WSConn) queued() (wsWrite, bool) {
	select {
	case w := <-c.writes:
		return w, true
	default:
		return wsWrite{}, false
	}
}

func (c *WSConn) failAsync(err error) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.asyncErr == nil {
		c.asyncErr = err
	}
}

func (c *WSConn) Read(p []byte) (int, error) {
	for {
		if c.reader == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				// The peer is gone: nothing queued can reach it any more.
				c.closeNow()
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

// smallWrite is the size up to which Write copies and returns at once: a frame header, a window
// update. The writer goroutine sends it with what follows.
const smallWrite = 64

func (c *WSConn) Write(p []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	c.errMu.Lock()
	err := c.asyncErr
	c.errMu.Unlock()
	if err != nil {
		return 0, err
	}
	w := wsWrite{p: p}
	if len(p) <= smallWrite {
		w.p = append([]byte(nil), p...)
	} else {
		// The writer goroutine sends p before answering, so p need not be copied.
		w.done = make(chan error, 1)
	}
	select {
	case c.writes <- w:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	if w.done == nil {
		return len(p), nil
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
	// Writes return before small ones are sent (see Write), so let what is queued go out first:
	// a refusal written just before Close must still reach the peer.
	done := make(chan error, 1)
	select {
	case c.writes <- wsWrite{done: done}:
		select {
		case <-done:
		case <-c.closed:
		case <-time.After(writeWait):
		}
	case <-c.closed:
	case <-time.After(writeWait):
	}
	return c.closeNow()
}

// closeNow closes without waiting for queued writes: the writer itself failed, or the peer went.
func (c *WSConn) closeNow() error {
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
