package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/hub"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/protocol"
)

// usageReport keeps a runner's sample of its sandbox's usage (protocol.OpUsageReport) as its
// workspace's latest. What a runner sends is bounded (metrics.CheckUsage): a report that does
// not decode or is out of bounds is refused and is a strike against the runner; one that comes
// too soon after the last is refused without one (a reconnect can bring two close together).
func (s *Server) usageReport(c *hub.Conn, h protocol.Header) protocol.Trailer {
	var u protocol.UsageReport
	if err := json.Unmarshal(h.Args, &u); err != nil {
		s.metrics.UsageRefused()
		s.strike(c, fmt.Sprintf("usage report: %v", err))
		return protocol.Trailer{Error: protocol.Errorf(protocol.CodeInvalidArgument, "usage report: %v", err)}
	}
	if err := metrics.CheckUsage(u); err != nil {
		s.metrics.UsageRefused()
		s.strike(c, err.Error())
		return protocol.Trailer{Error: protocol.AsError(err)}
	}
	if err := s.metrics.SetUsage(c.AllocationID, c.WorkspaceID, u, s.now()); err != nil {
		return protocol.Trailer{Error: protocol.AsError(err)}
	}
	return protocol.Trailer{OK: true}
}

// withUsage adds the latest usage its runner reported here to a workspace of the API. Another
// controller's runners report to it: their workspaces show none here.
func (s *Server) withUsage(ws api.Workspace) api.Workspace {
	if u, ok := s.metrics.Usage(ws.AllocationID); ok && ws.Connected {
		ws.Usage = &api.WorkspaceUsage{CPUPercent: u.CPUPercent, MemoryBytes: u.MemoryBytes, DiskBytes: u.DiskBytes, SampledAt: u.SampledAt}
	}
	return ws
}

// requireUnlimited admits the operator and API tokens not limited to workspaces: what it guards
// (the metrics) spans every workspace.
func (s *Server) requireUnlimited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r.Context()); p.limited() {
			writeError(w, p.refuse("/metrics"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveMetrics serves GET /metrics on l without authentication (tether serve --metrics-listen):
// for a scrape network only Prometheus reaches. Nothing else is served there.
func (s *Server) serveMetrics(l net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	srv := s.cfg.HTTP.server(s.observe(mux, func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		return pattern
	}), s.ctx)
	l = s.cfg.HTTP.limitListener(l)
	if !s.routines.Go("metrics server", func(ctx context.Context) { _ = serveHTTP(ctx, srv, l) }) {
		l.Close()
		return
	}
	s.log.Info("metrics served without authentication", "addr", l.Addr().String())
}
