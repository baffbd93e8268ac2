package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// ParseAddr is the one reading of a controller address: http://host:port or https://host:port
// (a trailing slash allowed), or host:port alone, taken as http:// the way the controller's own
// --listen is written. Anything else (another scheme, a path, a query, credentials) is
// invalid_argument: an address with a path would silently send every call somewhere else.
func ParseAddr(addr string) (*url.URL, error) {
	bad := func() error {
		return protocol.Errorf(protocol.CodeInvalidArgument, "controller address %q: want HOST:PORT, http://HOST:PORT or https://HOST:PORT", addr)
	}
	s := strings.TrimSpace(addr)
	if s == "" {
		return nil, bad()
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return nil, bad()
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil && port == "" {
		return nil, bad() // "host:" names no port
	}
	return u, nil
}

// Health asks GET /healthz, which needs no credentials: the controller's version and whether it
// is serving. A controller that answers 503 with its health (no heartbeat written lately) is
// returned with that status, not as an error: it is reachable and said who it is.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/healthz", nil), nil)
	if err != nil {
		return api.Health{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return api.Health{}, ctx.Err()
		}
		return api.Health{}, protocol.Errorf(protocol.CodeUnavailable, "cannot reach the controller at %s: %v", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	var h api.Health
	// A health answer is a few short strings; anything past 64 KiB is not one.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h); err != nil || h.Status == "" {
		return api.Health{}, protocol.Errorf(protocol.CodeUnavailable, "%s/healthz answered %s, not a controller's health", c.base, resp.Status)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return h, fmt.Errorf("healthz: %s", resp.Status)
	}
	return h, nil
}
