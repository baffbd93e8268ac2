package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/protocol"
)

// hostLocalCache remembers which providers keep their sandboxes on the controller's own host
// (provider.CapHostLocal), as their plugins said.
type hostLocalCache struct {
	mu sync.Mutex
	m  map[string]bool
}

// hostLocal says whether the named provider's sandboxes only the controller that made them can
// reach.
func (s *Server) hostLocal(ctx context.Context, name string) (bool, error) {
	s.hostLocals.mu.Lock()
	v, ok := s.hostLocals.m[name]
	s.hostLocals.mu.Unlock()
	if ok {
		return v, nil
	}
	prov, err := s.providerFor(ctx, name)
	if err != nil {
		return false, err
	}
	info, err := prov.Info(ctx)
	if err != nil {
		return false, err
	}
	v = slices.Contains(info.Capabilities, provider.CapHostLocal)
	s.hostLocals.mu.Lock()
	defer s.hostLocals.mu.Unlock()
	if s.hostLocals.m == nil {
		s.hostLocals.m = map[string]bool{}
	}
	s.hostLocals.m[name] = v
	return v, nil
}

// placedElsewhere names the live controller where an allocation's sandbox must be acted on when
// that is not this one ("" when it is this one). A host-local sandbox placed by a controller
// that is gone is unavailable: nothing else can reach it.
func (s *Server) placedElsewhere(ctx context.Context, a store.Allocation) (store.Member, bool, error) {
	if a.PlacedOn == "" || a.PlacedOn == s.id {
		return store.Member{}, false, nil
	}
	local, err := s.hostLocal(ctx, a.Provider)
	if err != nil || !local {
		return store.Member{}, false, err
	}
	m, err := s.store.GetMember(ctx, a.PlacedOn)
	if err == nil && !s.members.Alive(m) {
		err = protocol.Errorf(protocol.CodeUnavailable, "the %s sandbox of allocation %s lives on the host of controller %s, whose heartbeat expired at %s", a.Provider, a.ID, m.ID, m.HeartbeatAt.Format("15:04:05"))
	} else if protocol.CodeOf(err) == protocol.CodeNotFound {
		err = protocol.Errorf(protocol.CodeUnavailable, "the %s sandbox of allocation %s lives on the host of controller %s, which left the cluster", a.Provider, a.ID, a.PlacedOn)
	}
	if err != nil {
		return store.Member{}, false, err
	}
	return m, true, nil
}

// Sandbox operations a peer may ask of the controller a sandbox was placed on.
const (
	sandboxStop    = "stop"
	sandboxDestroy = "destroy"
	// sandboxStopKeep stops the sandbox and confirms with a fresh Inspect that it is kept
	// (workspace stop); sandboxStart starts a kept one with a new bootstrap token (the body).
	sandboxStopKeep = "stop-keep"
	sandboxStart    = "start"
)

func sandboxPath(allocationID, op string) string {
	return "/internal/v1/allocations/" + allocationID + "/" + op
}

// stopSandbox has the provider stop an allocation's sandbox where it can be reached.
func (s *Server) stopSandbox(ctx context.Context, a store.Allocation) error {
	return s.onSandbox(ctx, a, sandboxStop)
}

// destroySandbox has the provider destroy an allocation's sandbox where it can be reached.
func (s *Server) destroySandbox(ctx context.Context, a store.Allocation) error {
	return s.onSandbox(ctx, a, sandboxDestroy)
}

func (s *Server) onSandbox(ctx context.Context, a store.Allocation, op string) error {
	m, elsewhere, err := s.placedElsewhere(ctx, a)
	if err != nil {
		return err
	}
	if elsewhere {
		return s.peerCall(ctx, m, http.MethodPost, sandboxPath(a.ID, op))
	}
	return s.sandboxHere(ctx, a, op)
}

func (s *Server) sandboxHere(ctx context.Context, a store.Allocation, op string) error {
	prov, err := s.providerFor(ctx, a.Provider)
	if err != nil {
		return err
	}
	switch op {
	case sandboxStopKeep:
		return s.stopKeepHere(ctx, prov, a)
	case sandboxStop:
		err = prov.Stop(ctx, a.ID)
	default:
		err = prov.Destroy(ctx, a.ID)
	}
	if err != nil && provider.ErrorCode(err) != provider.CodeNotFound {
		return protocol.Errorf(protocol.CodeProviderFailed, "%s allocation %s: %v", op, a.ID, err)
	}
	return nil
}

// handleSandboxOp serves a peer's stop or destroy of a sandbox placed here.
func (s *Server) handleSandboxOp(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, err := s.store.GetAllocation(r.Context(), r.PathValue("id"))
		if err == nil && a.PlacedOn != s.id {
			err = protocol.Errorf(protocol.CodeInvalidArgument, "allocation %s was not placed on controller %s", a.ID, s.id)
		}
		if err == nil {
			err = s.sandboxHere(r.Context(), a, op)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// peerCall makes a call without a body to a peer and turns its refusal into the peer's error.
func (s *Server) peerCall(ctx context.Context, m store.Member, method, path string) error {
	return s.peerCallJSON(ctx, m, method, path, nil)
}

// peerCallJSON is peerCall with body, when not nil, sent as JSON.
func (s *Server) peerCallJSON(ctx context.Context, m store.Member, method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, m.Address+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	s.authorizePeer(req.Header)
	resp, err := s.peerHTTP.Do(req)
	if err != nil {
		return protocol.Errorf(protocol.CodeUnavailable, "controller %s: %v", m.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return decodeErrorBody(resp)
}

// forwardToPlacement serves a request about a workspace's sandbox itself (export to the host's
// disk, a service endpoint on the host's loopback) on the controller the sandbox was placed on,
// when that is another: it reports whether it answered the request.
func (s *Server) forwardToPlacement(w http.ResponseWriter, r *http.Request, ws api.Workspace) bool {
	a, err := s.store.GetAllocation(r.Context(), ws.AllocationID)
	if err != nil {
		writeError(w, err)
		return true
	}
	m, elsewhere, err := s.placedElsewhere(r.Context(), a)
	if err != nil {
		writeError(w, err)
		return true
	}
	if !elsewhere {
		return false
	}
	target, err := url.Parse(m.Address)
	if err != nil {
		writeError(w, protocol.Errorf(protocol.CodeInternal, "controller %s address %q: %v", m.ID, m.Address, err))
		return true
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization")
			s.authorizePeer(pr.Out.Header)
		},
		Transport: s.peerHTTP.Transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeError(w, protocol.Errorf(protocol.CodeUnavailable, "controller %s, where the sandbox lives: %v", m.ID, err))
		},
	}
	proxy.ServeHTTP(w, r)
	return true
}
