package controller

import (
	"net"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/protocol"
)

// The preview listener serves each link on a host of its own, {label}.DOMAIN, for apps that need
// to live at / and an origin of their own. The host name carries the link's id, never its
// secret: a host name goes to DNS resolvers and, behind TLS, into SNI and certificate logs. The
// secret comes once, in the query of the entry path, and is exchanged for a host-only, HttpOnly
// cookie; every later request (the page's scripts, its websockets) carries the cookie, which the
// app never sees.
const (
	previewEnterPath = "/__tether/enter"
	previewCookie    = "tether_preview"
)

// previewLabel is a link's host label: its id, made a DNS label (pv_… → pv-…).
func previewLabel(id string) string { return strings.ReplaceAll(id, "_", "-") }

// previewHost serves the preview listener.
func (s *Server) previewHost() http.Handler {
	return s.counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		label, domain, ok := strings.Cut(strings.ToLower(host), ".")
		if !ok || domain != strings.ToLower(s.cfg.PreviewDomain) {
			previewRefused(w, protocol.Errorf(protocol.CodeNotFound, "no such preview link: this listener serves {link}.%s", s.cfg.PreviewDomain))
			return
		}
		enter := r.URL.Path == previewEnterPath
		var token string
		if enter {
			token = r.URL.Query().Get("t")
		} else if c, err := r.Cookie(previewCookie); err == nil {
			token = c.Value
		}
		ws, v, id, err := s.previewOf(r.Context(), token)
		if err == nil && previewLabel(id) != label {
			// A link's secret opens its own host only.
			err = protocol.Errorf(protocol.CodeNotFound, "no such preview link")
		}
		if err != nil {
			previewRefused(w, err)
			return
		}
		if enter {
			http.SetCookie(w, &http.Cookie{Name: previewCookie, Value: token, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
			w.Header().Set("Referrer-Policy", "no-referrer")
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		dropCookie(r, previewCookie)
		s.serveProxy(w, r, proxyTarget{ws: ws, svc: v, rest: r.URL.EscapedPath(), preview: true, fail: previewRefused})
	}))
}

// dropCookie removes the cookie named name from r, keeping the others (the app's own) byte for
// byte: the Cookie header is split on its separators, not parsed, so a value net/http would call
// invalid (a JSON value with quotes) still reaches the app.
func dropCookie(r *http.Request, name string) {
	lines := r.Header.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for pair := range strings.SplitSeq(line, ";") {
			pair = strings.TrimSpace(pair)
			if pair == "" {
				continue
			}
			if k, _, _ := strings.Cut(pair, "="); strings.TrimSpace(k) == name {
				continue
			}
			kept = append(kept, pair)
		}
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
}
