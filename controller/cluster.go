package controller

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"

	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/peer"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// controllerIDFile keeps a controller's id across restarts, so what it placed (a local sandbox
// lives on its host) stays its own and a restart takes back its place in the cluster.
const controllerIDFile = "controller.id"

// loadControllerID reads DIR/controller.id, creating it on first start.
func loadControllerID(dir string) (string, error) {
	return loadOrCreate(filepath.Join(dir, controllerIDFile), func() string { return newID("ctl_") })
}

// authorizePeer sets the credentials of a call to another controller.
func (s *Server) authorizePeer(h http.Header) { peer.Authorize(h, s.id, s.peerSecret) }

// requirePeer guards the routes only controllers call.
func (s *Server) requirePeer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := peer.Authenticated(r, s.peerSecret); !ok {
			writeError(w, protocol.Errorf(protocol.CodeUnauthorized, "missing or wrong peer credentials"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// peerOrOperator admits a controller forwarding a request it authorized itself (placement:
// the sandbox lives on this host), and otherwise leaves the request to the operator guard.
func (s *Server) peerOrOperator(operator http.Handler, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if peer.IsPeerToken(bearer(r)) {
			s.requirePeer(api).ServeHTTP(w, r)
			return
		}
		operator.ServeHTTP(w, r)
	})
}

// reach finds a connection to an allocation's runner: the one this controller holds, or a
// tunnel through the controller that does (its owner in the store). A runner whose owner's
// heartbeat expired is unavailable at once, with the reason: it reconnects through the
// balancer, and the controller it lands on becomes its owner.
func (s *Server) reach(ctx context.Context, allocationID string) (*hub.Conn, error) {
	if c, ok := s.hub.Get(allocationID); ok {
		return c, nil
	}
	a, err := s.store.GetAllocation(ctx, allocationID)
	if err != nil {
		return nil, err
	}
	if a.State != store.AllocConnected || a.Owner == "" || a.Owner == s.id {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "the runner of allocation %s is not connected (%s)", a.ID, a.State)
	}
	// The owner's liveness is checked before a cached tunnel is used: a tunnel to an owner cut
	// off from this controller looks open until its websocket times out, and an operation on it
	// would wait that long instead of failing at once.
	m, err := s.store.GetMember(ctx, a.Owner)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "the runner of allocation %s is held by controller %s, which left the cluster; it reconnects to another", a.ID, a.Owner)
	}
	if err != nil {
		return nil, err
	}
	if !s.members.Alive(m) {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "the runner of allocation %s is held by controller %s, whose last heartbeat was at %s; it reconnects to another",
			a.ID, m.ID, m.HeartbeatAt.Format("15:04:05.000"))
	}
	if c := s.tunnels.get(a.ID, a.Owner); c != nil {
		return c, nil
	}
	c, err := peer.Dial(ctx, m.Address, a.ID, s.authorizePeer)
	if err != nil {
		return nil, err
	}
	return s.tunnels.put(a.ID, a.Owner, c), nil
}

// runnerOf is reach for callers that only need to know whether the runner can be reached.
func (s *Server) runnerOf(ctx context.Context, allocationID string) (*hub.Conn, bool) {
	c, err := s.reach(ctx, allocationID)
	return c, err == nil
}

// connected says whether an allocation's runner is connected to a live controller, without
// reaching it.
func (s *Server) connected(ctx context.Context, allocationID string) bool {
	if _, ok := s.hub.Get(allocationID); ok {
		return true
	}
	a, err := s.store.GetAllocation(ctx, allocationID)
	if err != nil || a.State != store.AllocConnected || a.Owner == "" || a.Owner == s.id {
		return false
	}
	m, err := s.store.GetMember(ctx, a.Owner)
	return err == nil && s.members.Alive(m)
}

// tunnelCache keeps the tunnels this controller opened to runners other controllers hold, one
// per allocation, for as long as the tunnel lives and the store names the same owner.
type tunnelCache struct {
	mu sync.Mutex
	m  map[string]tunnel
}

type tunnel struct {
	owner string
	conn  *hub.Conn
}

func (t *tunnelCache) get(allocationID, owner string) *hub.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn, ok := t.m[allocationID]
	if !ok {
		return nil
	}
	if tn.owner == owner && !closed(tn.conn) {
		return tn.conn
	}
	delete(t.m, allocationID)
	tn.conn.Close()
	return nil
}

// put keeps c unless a concurrent caller already kept a live tunnel, which it returns instead
// (closing c).
func (t *tunnelCache) put(allocationID, owner string, c *hub.Conn) *hub.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]tunnel{}
	}
	if tn, ok := t.m[allocationID]; ok && tn.owner == owner && !closed(tn.conn) {
		c.Close()
		return tn.conn
	} else if ok {
		tn.conn.Close()
	}
	t.m[allocationID] = tunnel{owner: owner, conn: c}
	return c
}

// closeAll closes every tunnel (the controller is stopping).
func (t *tunnelCache) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, tn := range t.m {
		tn.conn.Close()
		delete(t.m, id)
	}
}

func closed(c *hub.Conn) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}
