package controller

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/protocol"
)

// HeaderEpoch carries the writer epoch a mutating call claims to hold.
const HeaderEpoch = "X-Tether-Epoch"

const (
	defaultLeaseTTL = 5 * time.Minute
	maxLeaseWait    = 10 * time.Minute
	leasePoll       = 50 * time.Millisecond
	pushEpochWait   = 5 * time.Second
)

// writerEpoch decides the epoch a mutating call runs under. While a lease is held, only its
// holder's epoch is admitted (no epoch: lease_held; another one: stale_epoch). With no lease, a
// call that claims an epoch is a holder whose lease expired or was released: fenced. A call
// that claims none runs under the workspace's current epoch, as an implicit short lease.
func (s *Server) writerEpoch(ctx context.Context, ws api.Workspace, r *http.Request) (uint64, error) {
	var claimed uint64
	raw := r.Header.Get(HeaderEpoch)
	if raw != "" {
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return 0, protocol.Errorf(protocol.CodeInvalidArgument, "%s %q is not an epoch", HeaderEpoch, raw)
		}
		claimed = n
	}
	l, held, err := s.store.CurrentLease(ctx, ws.ID)
	if err != nil {
		return 0, err
	}
	switch {
	case held && raw == "":
		return 0, protocol.Errorf(protocol.CodeLeaseHeld, "workspace %s is leased to %q (epoch %d); pass its epoch (--epoch / TETHER_EPOCH) to write", ws.ID, l.Holder, l.Epoch)
	case held && claimed != l.Epoch:
		return 0, protocol.Errorf(protocol.CodeStaleEpoch, "epoch %d is stale: the lease of workspace %s is at epoch %d", claimed, ws.ID, l.Epoch)
	case held:
		return l.Epoch, nil
	case raw != "":
		return 0, protocol.Errorf(protocol.CodeStaleEpoch, "epoch %d holds no live lease on workspace %s (expired or released)", claimed, ws.ID)
	}
	return ws.Epoch, nil
}

// writer resolves a mutating call: the workspace's connected runner and the epoch to run under.
func (s *Server) writer(r *http.Request) (api.Workspace, *hub.Conn, uint64, error) {
	ws, err := s.liveConn(r.Context(), r.PathValue("id"))
	if err != nil {
		return ws, nil, 0, err
	}
	epoch, err := s.writerEpoch(r.Context(), ws, r)
	if err != nil {
		return ws, nil, 0, err
	}
	c, err := s.runnerFor(r.Context(), ws.ID)
	return ws, c, epoch, err
}

// pushEpoch tells the workspace's runner about a new epoch at once, so writes of the previous
// holder are refused even if they reach the runner late. Best effort: a runner that is not
// connected learns the epoch in its next welcome.
func (s *Server) pushEpoch(ctx context.Context, ws api.Workspace, epoch uint64) {
	// Bounded: the lease is granted whatever happens here, and its holder must hear so. A runner
	// that does not take the epoch in time learns it in its next welcome, and the controller
	// fences older writes itself meanwhile.
	ctx, cancel := context.WithTimeout(ctx, pushEpochWait)
	defer cancel()
	c, ok := s.runnerOf(ctx, ws.AllocationID)
	if !ok {
		return
	}
	if err := c.Call(ctx, protocol.OpSetEpoch, epoch, struct{}{}, nil); err != nil {
		s.log.Warn("push epoch", "workspace", ws.ID, "epoch", epoch, "err", err)
	}
}

func parseDuration(field, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "%s %q: want a duration like 30s or 5m", field, v)
	}
	return d, nil
}

func (s *Server) handleLeaseAcquire(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.LeaseRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Holder == "" {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "a lease needs a holder name"))
		return
	}
	ttl, err := parseDuration("ttl", req.TTL, defaultLeaseTTL)
	if err == nil && ttl == 0 {
		err = protocol.Errorf(protocol.CodeInvalidArgument, "ttl must be positive")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	wait, err := parseDuration("wait", req.Wait, 0)
	if err != nil {
		writeError(w, err)
		return
	}
	deadline := s.cfg.Clock.Now().Add(min(wait, maxLeaseWait))
	for {
		l, err := s.store.AcquireLease(r.Context(), ws.ID, req.Holder, ttl)
		if err == nil {
			s.pushEpoch(r.Context(), ws, l.Epoch)
			writeJSON(w, http.StatusCreated, l)
			return
		}
		if protocol.CodeOf(err) != protocol.CodeLeaseHeld || s.cfg.Clock.Now().After(deadline) {
			writeError(w, err)
			return
		}
		select {
		case <-s.cfg.Clock.After(leasePoll):
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) handleLeaseRenew(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.LeaseRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	ttl, err := parseDuration("ttl", req.TTL, defaultLeaseTTL)
	if err != nil {
		writeError(w, err)
		return
	}
	l, err := s.store.RenewLease(r.Context(), ws.ID, req.Epoch, ttl)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) handleLeaseRelease(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	epoch, err := strconv.ParseUint(r.URL.Query().Get("epoch"), 10, 64)
	if err != nil {
		writeError(w, protocol.Errorf(protocol.CodeInvalidArgument, "release needs ?epoch=N"))
		return
	}
	if err := s.store.ReleaseLease(r.Context(), ws.ID, epoch); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleLeaseShow(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	l, held, err := s.store.CurrentLease(r.Context(), ws.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	if !held {
		writeError(w, protocol.Errorf(protocol.CodeNotFound, "no lease is held on workspace %s (epoch %d)", ws.ID, ws.Epoch))
		return
	}
	writeJSON(w, http.StatusOK, l)
}
