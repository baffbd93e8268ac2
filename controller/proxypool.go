package controller

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/protocol"
)

// The proxy's connections into a service are kept between requests: each new one costs a
// round trip to the runner (its dial) before the request's own, and a browser sends many small
// requests. Each (workspace, service) has its own transport, so a connection only ever carries
// requests for the service it was dialed to. An idle connection still holds a slot of the
// workspace's connection limit, so few are kept, not for long, and they go at once when the
// service is stopped through the API or the controller drains.
const (
	// proxyIdlePerService is how many idle connections one service keeps: a browser opens six per
	// host, a bench or a page with several clients more; fewer means a runner dial per request.
	proxyIdlePerService = 16
	// proxyIdleTimeout is how long an idle connection is kept.
	proxyIdleTimeout = 30 * time.Second
	// proxyMaxResponseHeader bounds an app's response header (Go's default is 10 MiB, on each of
	// a workspace's connections).
	proxyMaxResponseHeader = 256 << 10
	// proxyPoolMax bounds the services with a transport; past it, the least recently used goes.
	proxyPoolMax = 256
)

type proxyKey struct{ workspace, service string }

type proxyEntry struct {
	port       int
	allocation string // the sandbox the transport dials into: a reopened workspace has another
	t          *http.Transport
	used       time.Time
}

// proxyPool holds the proxy's transports by (workspace, service).
type proxyPool struct {
	mu sync.Mutex
	m  map[proxyKey]*proxyEntry
}

// transport returns the transport to service v of ws, made on first use. A service now on
// another port than its transport's (restarted), or in another sandbox (the workspace was
// reopened), gets a new one: the transport's dial uses the workspace as read when it was made.
func (s *Server) proxyTransport(ws api.Workspace, v api.Service) *http.Transport {
	p := &s.proxies
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[proxyKey]*proxyEntry{}
	}
	k := proxyKey{ws.ID, v.Name}
	now := time.Now()
	if e := p.m[k]; e != nil && e.port == v.Port && e.allocation == ws.AllocationID {
		e.used = now
		return e.t
	} else if e != nil {
		e.t.CloseIdleConnections()
	}
	if len(p.m) >= proxyPoolMax {
		var oldest proxyKey
		var at time.Time
		for k, e := range p.m {
			if at.IsZero() || e.used.Before(at) {
				oldest, at = k, e.used
			}
		}
		p.m[oldest].t.CloseIdleConnections()
		delete(p.m, oldest)
	}
	port, name := v.Port, v.Name
	t := &http.Transport{
		// Every connection is dialed by the workspace's runner inside the sandbox, counted
		// against the workspace's limit and paced by its bandwidth; the address the transport
		// asks for is only its pool key. The service is checked again at the dial: still
		// ready, still on the port this transport is for.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, now, err := s.dialService(ctx, ws, name)
			if err != nil {
				return nil, err
			}
			if now.Port != port {
				c.Close()
				return nil, protocol.Errorf(protocol.CodeUnavailable, "service %s moved to port %d; ask again", name, now.Port)
			}
			c.bytes = s.metrics.BytesCounter(metrics.KindProxy)
			return &pacedConn{forwardedConn: c, ctx: s.ctx}, nil
		},
		MaxIdleConnsPerHost: proxyIdlePerService,
		// What the app sends is held while its headers are parsed: bounded like a request's.
		MaxResponseHeaderBytes: proxyMaxResponseHeader,
		IdleConnTimeout:        proxyIdleTimeout,
		ExpectContinueTimeout:  time.Second,
		// The app's encoding passes through untouched; the transport adds none of its own.
		DisableCompression: true,
	}
	p.m[k] = &proxyEntry{port: port, allocation: ws.AllocationID, t: t, used: now}
	return t
}

// dropProxy closes the idle connections to a service and forgets its transport (the service
// stopped).
func (s *Server) dropProxy(workspaceID, service string) {
	p := &s.proxies
	p.mu.Lock()
	defer p.mu.Unlock()
	k := proxyKey{workspaceID, service}
	if e := p.m[k]; e != nil {
		e.t.CloseIdleConnections()
		delete(p.m, k)
	}
}

// closeIdleProxies closes every idle proxied connection: a draining controller waits for the
// streams open on its runners, and an idle connection is one.
func (s *Server) closeIdleProxies() {
	p := &s.proxies
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.m {
		e.t.CloseIdleConnections()
		delete(p.m, k)
	}
}

// pacedConn is a connection into a sandbox whose bytes, both ways, wait for the workspace's
// bandwidth budget (forward.Limits.BytesPerSecond).
type pacedConn struct {
	*forwardedConn
	ctx context.Context
}

// pacedChunk is the most bytes one wait asks for: the budget's burst is at least this.
const pacedChunk = 64 << 10

func (c *pacedConn) Read(p []byte) (int, error) {
	if len(p) > pacedChunk {
		p = p[:pacedChunk]
	}
	n, err := c.forwardedConn.Read(p)
	if n > 0 {
		if werr := c.Grant.Wait(c.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

func (c *pacedConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), pacedChunk)]
		if err := c.Grant.Wait(c.ctx, len(chunk)); err != nil {
			return written, err
		}
		n, err := c.forwardedConn.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}
