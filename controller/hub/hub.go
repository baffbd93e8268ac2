package hub

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
)

// Conn is one connected runner.
type Conn struct {
	AllocationID string
	WorkspaceID  string
	Hello        protocol.Hello
	Protocol     int
	ConnectedAt  time.Time
	sess         *yamux.Session
	strikes      atomic.Int32
}

// Strike counts one budget violation of the runner and returns the connection's count so far.
func (c *Conn) Strike() int { return int(c.strikes.Add(1)) }

// Done is closed when the connection ends.
func (c *Conn) Done() <-chan struct{} { return c.sess.CloseChan() }

// Accept waits for a stream the runner opens (runner-initiated operations).
func (c *Conn) Accept() (*yamux.Stream, error) { return c.sess.AcceptStream() }

// OpenStream opens a raw stream on the runner's session, for a peer's tunnel to splice an
// operation onto (its header comes from the peer).
func (c *Conn) OpenStream() (*yamux.Stream, error) { return c.sess.OpenStream() }

// Streams is the number of streams open on the connection: operations in flight, either way
// (none once the connection ended: a closed session still lists the streams it cut).
func (c *Conn) Streams() int {
	if c.sess.IsClosed() {
		return 0
	}
	return c.sess.NumStreams()
}

// Close drops the connection; the runner will try to reconnect.
func (c *Conn) Close() error { return c.sess.Close() }

// Hub maps allocations to their connections.
type Hub struct {
	mu      sync.Mutex
	conns   map[string]*Conn
	waiters map[string][]chan struct{}
	// admitting holds the reservation of each allocation whose new connection is between Admit
	// and Add.
	admitting map[string]*reservation
}

// reservation is not zero-sized: distinct reservations must compare unequal.
type reservation struct{ _ byte }

func New() *Hub {
	return &Hub{conns: map[string]*Conn{}, waiters: map[string][]chan struct{}{}, admitting: map[string]*reservation{}}
}

// Errors of Admit.
var (
	// ErrLive: the allocation's runner is connected and answered a ping just now.
	ErrLive = errors.New("the allocation's runner is connected")
	// ErrAdmitting: another connection of the allocation is being set up.
	ErrAdmitting = errors.New("another connection of the allocation is being set up")
)

// Admit reserves the allocation for one new connection, until Add registers it or release is
// called. A second connection is never allowed to replace a live one: when the allocation has a
// connection, it is pinged, and only one that fails to answer within probe — the half-open
// session of a runner whose network dropped, which is now reconnecting — is closed to make room.
// One that answers makes Admit refuse with ErrLive; a reservation already held, ErrAdmitting.
func (h *Hub) Admit(allocationID string, probe time.Duration) (release func(), err error) {
	h.mu.Lock()
	if h.admitting[allocationID] != nil {
		h.mu.Unlock()
		return nil, ErrAdmitting
	}
	r := &reservation{}
	h.admitting[allocationID] = r
	old := h.conns[allocationID]
	h.mu.Unlock()
	// Releasing ends this reservation only: once Add ended it, a later one is not touched.
	release = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.admitting[allocationID] == r {
			delete(h.admitting, allocationID)
		}
	}
	if old != nil && !old.sess.IsClosed() {
		if old.Alive(probe) {
			release()
			return nil, ErrLive
		}
		old.Close()
	}
	return release, nil
}

// Alive pings the runner and says whether it answered within timeout.
func (c *Conn) Alive(timeout time.Duration) bool {
	answered := make(chan error, 1)
	// A Ping on a dead session waits for yamux's own timeout; it ends with the session, which
	// the caller closes when the answer does not come in time.
	go func() {
		_, err := c.sess.Ping()
		answered <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-answered:
		return err == nil
	case <-t.C:
		return false
	}
}

// Add registers c, ending the reservation Admit made for it. An older connection of the same
// allocation still registered (Admit found it dead, or there was no Admit) is closed: one
// allocation never has two live sessions.
func (h *Hub) Add(c *Conn) {
	h.mu.Lock()
	old := h.conns[c.AllocationID]
	h.conns[c.AllocationID] = c
	delete(h.admitting, c.AllocationID)
	ws := h.waiters[c.AllocationID]
	delete(h.waiters, c.AllocationID)
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
	for _, w := range ws {
		close(w)
	}
}

// Remove forgets c if it is still the allocation's current connection.
func (h *Hub) Remove(c *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[c.AllocationID] == c {
		delete(h.conns, c.AllocationID)
	}
}

// Get returns the live connection of an allocation.
func (h *Hub) Get(allocationID string) (*Conn, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.conns[allocationID]
	if ok && c.sess.IsClosed() {
		delete(h.conns, allocationID)
		return nil, false
	}
	return c, ok
}

// Wait blocks until the allocation's runner is connected or ctx ends.
func (h *Hub) Wait(ctx context.Context, allocationID string) (*Conn, error) {
	for {
		h.mu.Lock()
		if c, ok := h.conns[allocationID]; ok && !c.sess.IsClosed() {
			h.mu.Unlock()
			return c, nil
		}
		ch := make(chan struct{})
		h.waiters[allocationID] = append(h.waiters[allocationID], ch)
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			h.dropWaiter(allocationID, ch)
			return nil, ctx.Err()
		}
	}
}

// dropWaiter forgets a waiter that gave up, so runners that never connect leave nothing behind.
func (h *Hub) dropWaiter(allocationID string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[allocationID]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(h.waiters, allocationID)
	} else {
		h.waiters[allocationID] = ws
	}
}

// CloseAll closes every connection.
func (h *Hub) CloseAll() {
	h.mu.Lock()
	conns := make([]*Conn, 0, len(h.conns))
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Len is the number of connections registered (runners connected here).
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Streams is the number of streams open on every connection (see Conn.Streams).
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.conns {
		n += c.Streams()
	}
	return n
}

// Disconnect closes the allocation's connection, if any.
func (h *Hub) Disconnect(allocationID string) {
	if c, ok := h.Get(allocationID); ok {
		c.Close()
	}
}

// NewConn wraps an accepted runner session.
func NewConn(sess *yamux.Session, allocationID, workspaceID string, hello protocol.Hello, version int) *Conn {
	return &Conn{AllocationID: allocationID, WorkspaceID: workspaceID, Hello: hello, Protocol: version,
		ConnectedAt: time.Now(), sess: sess}
}

// Open opens an operation stream and sends its header, carrying the writer epoch the operation
// runs under (the runner fences mutating operations with an older one); the caller closes the
// stream.
func (c *Conn) Open(op, id string, epoch uint64, args any) (*yamux.Stream, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	header, err := json.Marshal(protocol.Header{Op: op, ID: id, Epoch: epoch, Args: raw})
	if err != nil {
		return nil, err
	}
	if len(header) > protocol.MaxFrame {
		return nil, protocol.Errorf(protocol.CodeTooLarge, "%s request of %d bytes exceeds the %d-byte limit", op, len(header), protocol.MaxFrame)
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "runner of allocation %s: %v", c.AllocationID, err)
	}
	if err := protocol.WriteJSON(st, json.RawMessage(header)); err != nil {
		st.Close()
		err = protocol.Errorf(protocol.CodeUnavailable, "runner of allocation %s: %v", c.AllocationID, err)
		// The runner acts only on a whole header, so a failed write on a session that lives on
		// started nothing; a session that died with it may have delivered it all. yamux hands
		// the writer its error just before it shuts the session down: wait for that, briefly.
		select {
		case <-c.sess.CloseChan():
			return nil, maybeSentError{err}
		case <-time.After(time.Second):
			return nil, err
		}
	}
	return st, nil
}

// maybeSentError is an Open whose request header failed to write. yamux can report a failure for
// bytes that did reach the peer when the session dies mid-write, so the runner may have received
// the request and started the operation.
type maybeSentError struct{ err error }

func (e maybeSentError) Error() string { return e.err.Error() }
func (e maybeSentError) Unwrap() error { return e.err }

// MaybeSent says whether err, from Open, leaves open whether the runner received the request.
// Operations with effects (a started command) must then wait for the runner's own report instead
// of recording that they failed.
func MaybeSent(err error) bool {
	var m maybeSentError
	return errors.As(err, &m)
}
