package controller

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/console"
	"github.com/tetherhq/tether/protocol"
)

// The HTTP proxy into a workspace's service: the operator's (under /v1/, with the operator or an
// API token), and a preview link's (previews.go), which share everything below but how they
// refuse. Every connection to the service is dialed by the runner inside the sandbox
// (dialAllowed), so a service bound to the sandbox's loopback on a private network is reached
// as well as any other.

// proxyStripped are response headers an app could use to take over the origin it is served
// from, which is the controller's own on the main listener: Service-Worker-Allowed would let a
// page register a service worker for the whole origin (every other preview, the API paths),
// Clear-Site-Data would wipe what the browser keeps for the origin (other previews' cookies and
// storage).
// Strict-Transport-Security and Alt-Svc would bind the controller's host (and, with
// includeSubDomains, every preview host under it) to what the app says. Cross-Origin-Opener-Policy
// equal to the console's (same-origin) would keep an app's page and a console window it opens in
// one browsing context group, handing it the console's window and its session secret.
var proxyStripped = []string{"Service-Worker-Allowed", "Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc", "Cross-Origin-Opener-Policy"}

// tetherCredential says whether an Authorization header carries a Tether token (the operator's or
// an API token): never the app's to see, whichever way the request came in.
func tetherCredential(h string) bool {
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return ok && (strings.HasPrefix(tok, prefixOperator) || strings.HasPrefix(tok, prefixAPI))
}

// proxyTarget is one request to proxy.
type proxyTarget struct {
	ws  api.Workspace
	svc api.Service
	// prefix is the path the request came in under, stripped before it is sent on and told to
	// the app as X-Forwarded-Prefix ("" on the preview host).
	prefix string
	// rest is the escaped path sent to the service, "/" at least.
	rest string
	// preview: the request came with a preview link (no operator token).
	preview bool
	// fail answers a request the proxy could not complete.
	fail func(w http.ResponseWriter, err error)
}

// splitPrefix cuts an escaped path after its first n segments: the prefix ("/a/b" for n=2) and
// the rest ("/" at least).
func splitPrefix(escaped string, n int) (prefix, rest string) {
	parts := strings.SplitN(escaped, "/", n+2)
	if len(parts) < n+1 {
		return escaped, "/"
	}
	prefix = strings.Join(parts[:n+1], "/")
	if len(parts) == n+2 {
		rest = "/" + parts[n+1]
	} else {
		rest = "/"
	}
	return prefix, rest
}

// serveProxy sends r to the service and streams its answer back: bodies both ways as they come
// (a server-sent event is flushed at once), an Upgrade (websocket) joined both ways.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, t proxyTarget) {
	if t.preview {
		// Preview traffic uses the workspace like the proxy route does (which inUse counts).
		defer s.beginActivity(r.Context(), t.ws.ID)()
	}
	upstream := "localhost:" + strconv.Itoa(t.svc.Port)
	rp := &httputil.ReverseProxy{
		Transport:     s.proxyTransport(t.ws, t.svc),
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The Host a dev server sees is its own (localhost:PORT), which is what their
			// host checks allow by default; the client's is X-Forwarded-Host.
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", upstream, ""
			pr.Out.URL.RawPath = t.rest
			pr.Out.URL.Path, _ = url.PathUnescape(t.rest)
			pr.SetXForwarded()
			// What the client says of the proxy's own headers is not passed on as if the proxy
			// had said it (a prefix an app builds its links and redirects from).
			pr.Out.Header.Del("X-Forwarded-Prefix")
			pr.Out.Header.Del("Forwarded")
			if t.prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
			}
			// The console's session is the controller's too (the app is not even told of it).
			if console.HasCookie(pr.Out) {
				dropCookie(pr.Out, console.CookieName)
			}
			if !t.preview || tetherCredential(pr.Out.Header.Get("Authorization")) {
				// A Tether credential is the controller's, never the app's.
				pr.Out.Header.Del("Authorization")
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			for _, h := range proxyStripped {
				resp.Header.Del(h)
			}
			if loc := resp.Header.Get("Location"); loc != "" {
				resp.Header.Set("Location", rewriteLocation(loc, upstream, t.prefix, r.Host))
			}
			scopeCookies(resp.Header, t.prefix)
			if t.preview && resp.Header.Get("Referrer-Policy") == "" {
				// A link out of the page (or to another preview on the same origin) would
				// otherwise tell where it leads the preview's URL, token and all.
				resp.Header.Set("Referrer-Policy", "no-referrer")
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went; nothing to answer
			}
			if protocol.CodeOf(err) == protocol.CodeInternal {
				// Not the controller's refusal: the service (or its connection) failed.
				err = protocol.Errorf(protocol.CodeUnavailable, "service %s of workspace %s: %v", t.svc.Name, t.ws.Name, err)
			}
			t.fail(w, err)
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(w, r)
}

// rewriteLocation keeps a redirect of the app under its prefix: an absolute URL to the
// upstream, or to the controller itself (self: the host the client asked), becomes a path under
// the prefix, and a path from the root that is not already under it (an app that ignores
// X-Forwarded-Prefix) is put under it. An app never redirects a client, who may follow with its
// token, to the controller's API.
func rewriteLocation(loc, upstream, prefix, self string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return loc
	}
	if u.Host != "" {
		toUpstream := strings.EqualFold(u.Host, upstream) || strings.EqualFold(u.Host, "127.0.0.1:"+upstream[len("localhost:"):])
		if !toUpstream && (self == "" || !strings.EqualFold(u.Host, self)) {
			return loc
		}
		u.Scheme, u.Host, u.User = "", "", nil
	} else if u.Scheme != "" || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") {
		return loc // relative to the page, or another scheme: right as it is
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	// Dot segments are resolved first: a path that only looks under the prefix
	// (PREFIX/../../v1/…) is a path from the root, which a client following the redirect with
	// its token would otherwise send to the API.
	p = cleanURLPath(p)
	if prefix != "" && p != prefix && !strings.HasPrefix(p, prefix+"/") {
		p = prefix + p
	}
	out := p
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	if u.Fragment != "" {
		out += "#" + u.EscapedFragment()
	}
	return out
}

// scopeCookies keeps the app's cookies under its prefix: on the controller's origin every
// preview shares one host, so a cookie set for / would be sent to every other preview's app.
// A cookie whose path is not under the prefix (the app's own view of /) is put under it; a
// cookie that cannot be parsed is dropped rather than passed on unscoped.
func scopeCookies(h http.Header, prefix string) {
	raw := h.Values("Set-Cookie")
	if prefix == "" || len(raw) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range raw {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			continue
		}
		p := cleanURLPath("/" + strings.TrimPrefix(c.Path, "/"))
		if p != prefix && !strings.HasPrefix(p, prefix+"/") {
			p = strings.TrimSuffix(prefix+p, "/")
			if p == "" {
				p = "/"
			}
		}
		c.Path = p
		if v := c.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
}

// cleanURLPath resolves . and .. segments of an escaped path, keeping a trailing slash.
func cleanURLPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// handleServiceProxy is the operator's proxy:
// ANY /v1/workspaces/{id}/services/{name}/proxy/{path...}.
func (s *Server) handleServiceProxy(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspaceRecord(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	v, err := s.readyService(r.Context(), ws, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	prefix, rest := splitPrefix(r.URL.EscapedPath(), 6)
	s.serveProxy(w, r, proxyTarget{ws: ws, svc: v, prefix: prefix, rest: rest, fail: proxyAPIError})
}

// handleServiceProxyRoot sends /proxy to /proxy/, so the app's relative URLs resolve under it.
func (s *Server) handleServiceProxyRoot(w http.ResponseWriter, r *http.Request) {
	if _, err := s.workspace(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	redirectSlash(w, r)
}

// redirectSlash answers with a redirect to r's path with a slash added, keeping the method
// and body (307) and the query.
func redirectSlash(w http.ResponseWriter, r *http.Request) {
	to := r.URL.EscapedPath() + "/"
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, to, http.StatusTemporaryRedirect)
}

// proxyAPIError answers a failed proxied request as the API answers errors (JSON): a service
// that is not ready, or whose connection failed, is unavailable (503).
func proxyAPIError(w http.ResponseWriter, err error) { writeError(w, err) }
