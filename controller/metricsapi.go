package controller

import (
	"context"
	"net"
	"net/http"
)

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
