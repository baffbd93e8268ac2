package controller

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"html"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// Preview links let a browser reach one service of one workspace without the operator token:
// GET /p/{token}/… on the controller's address, or http://pv-ID.DOMAIN/… (after its entry) on the preview
// listener (tether serve --preview-listen, --preview-domain) for an app that must live at /.
// The token is 160 random bits written as 32 lowercase base32 characters, so it fits a DNS
// label; the store keeps its SHA-256 alone (as API tokens), with the workspace and service it
// reaches and its expiry, so any controller of a cluster serves any link. A link is refused
// once expired (the controller's clock), revoked (service url --revoke, or the service stopped
// through the API), when its workspace is deleted, or while its service is not ready.

const (
	// DefaultPreviewTTL is how long a preview link works when the request names no TTL.
	DefaultPreviewTTL = time.Hour
	// MaxPreviewTTL is the longest a preview link may work.
	MaxPreviewTTL = 7 * 24 * time.Hour
	// previewPurgeAfter is how long a dead (expired or revoked) preview's record is kept, so a
	// link refused shortly after says why.
	previewPurgeAfter = 24 * time.Hour
)

// previewTokenLen is the length of a preview token: 20 bytes in base32.
const previewTokenLen = 32

var previewEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newPreviewToken() string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG does not fail on Linux
	}
	return previewEncoding.EncodeToString(b)
}

// validPreviewToken says whether t has a preview token's form (checked before any lookup).
func validPreviewToken(t string) bool {
	if len(t) != previewTokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

func (s *Server) handlePreviewCreate(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.PreviewRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	ttl, err := parseDuration("ttl", req.TTL, DefaultPreviewTTL)
	if err == nil && (ttl <= 0 || ttl > MaxPreviewTTL) {
		err = protocol.Errorf(protocol.CodeInvalidArgument, "ttl %s: want more than 0 and at most %s", req.TTL, MaxPreviewTTL)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	v, err := s.readyService(r.Context(), ws, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	now := s.now()
	token := newPreviewToken()
	p := store.Preview{ID: newID("pv_"), Hash: hashToken(token), WorkspaceID: ws.ID, Service: v.Name,
		CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := s.store.CreatePreview(r.Context(), p); err != nil {
		writeError(w, err)
		return
	}
	if n, err := s.store.PurgePreviews(r.Context(), now.Add(-previewPurgeAfter)); err != nil {
		s.log.Warn("purge old previews", "err", err)
	} else if n > 0 {
		s.log.Info("purged old previews", "count", n)
	}
	out := previewRecord(p, now)
	out.PathURL = strings.TrimSuffix(s.advertise, "/") + "/p/" + token + "/"
	out.URL = out.PathURL
	if base := s.previewHostBase(); base != "" {
		out.URL = "http://" + previewLabel(p.ID) + "." + base + previewEnterPath + "?t=" + token
	}
	writeJSON(w, http.StatusCreated, out)
}

// previewHostBase is DOMAIN[:PORT] of the preview listener, "" without one.
func (s *Server) previewHostBase() string {
	if s.cfg.PreviewListener == nil || s.cfg.PreviewDomain == "" {
		return ""
	}
	base := s.cfg.PreviewDomain
	if a, ok := s.cfg.PreviewListener.Addr().(*net.TCPAddr); ok && a.Port != 80 {
		base += ":" + strconv.Itoa(a.Port)
	}
	return base
}

func previewRecord(p store.Preview, now time.Time) api.Preview {
	out := api.Preview{ID: p.ID, WorkspaceID: p.WorkspaceID, Service: p.Service, State: "live",
		CreatedAt: p.CreatedAt, ExpiresAt: p.ExpiresAt}
	switch {
	case !p.RevokedAt.IsZero():
		at := p.RevokedAt
		out.State, out.RevokedAt = "revoked", &at
	case !now.Before(p.ExpiresAt):
		out.State = "expired"
	}
	return out
}

func (s *Server) handlePreviewList(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := s.store.ListPreviews(r.Context(), ws.ID, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	now := s.now()
	out := make([]api.Preview, len(list))
	for i, p := range list {
		out[i] = previewRecord(p, now)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handlePreviewRevoke(w http.ResponseWriter, r *http.Request) {
	ws, err := s.workspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	n, err := s.store.RevokePreviews(r.Context(), ws.ID, r.PathValue("name"), s.now())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.PreviewsRevoked{Revoked: n})
}

// revokeOnStop revokes the previews of a service stopped through the API (best effort: a
// preview of a service that is not ready is refused anyway) and lets its idle proxied
// connections go.
func (s *Server) revokeOnStop(ctx context.Context, workspaceID, service string) {
	if _, err := s.store.RevokePreviews(context.WithoutCancel(ctx), workspaceID, service, s.now()); err != nil {
		s.log.Warn("revoke the previews of a stopped service", "workspace", workspaceID, "service", service, "err", err)
	}
	s.dropProxy(workspaceID, service)
}

// preview finds what a preview token reaches. Every refusal is typed: not_found (no such link:
// an unknown token and one of malformed shape alike), revoked (revoked or expired, or its
// workspace deleted), unavailable (its service is not ready).
func (s *Server) preview(ctx context.Context, token string) (api.Workspace, api.Service, error) {
	ws, v, _, err := s.previewOf(ctx, token)
	return ws, v, err
}

// previewOf is preview that also returns the link's id.
func (s *Server) previewOf(ctx context.Context, token string) (api.Workspace, api.Service, string, error) {
	unknown := protocol.Errorf(protocol.CodeNotFound, "no such preview link")
	if !validPreviewToken(token) {
		return api.Workspace{}, api.Service{}, "", unknown
	}
	p, err := s.store.PreviewByHash(ctx, hashToken(token))
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return api.Workspace{}, api.Service{}, "", unknown
	}
	if err != nil {
		return api.Workspace{}, api.Service{}, "", err
	}
	switch {
	case !p.RevokedAt.IsZero():
		return api.Workspace{}, api.Service{}, "", protocol.Errorf(protocol.CodeRevoked, "this preview link was revoked at %s", p.RevokedAt.Format(time.RFC3339))
	case !s.now().Before(p.ExpiresAt):
		return api.Workspace{}, api.Service{}, "", protocol.Errorf(protocol.CodeRevoked, "this preview link expired at %s", p.ExpiresAt.Format(time.RFC3339))
	}
	ws, err := s.store.GetWorkspace(ctx, p.WorkspaceID)
	if protocol.CodeOf(err) == protocol.CodeNotFound || (err == nil && ws.State == api.StateDeleted) {
		return api.Workspace{}, api.Service{}, "", protocol.Errorf(protocol.CodeRevoked, "the workspace of this preview link was deleted")
	}
	if err != nil {
		return api.Workspace{}, api.Service{}, "", err
	}
	v, err := s.readyService(ctx, ws, p.Service)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		err = protocol.Errorf(protocol.CodeRevoked, "the service of this preview link is gone")
	}
	return ws, v, p.ID, err
}

// handlePreviewPath serves /p/{token}/{path...} on the controller's address.
func (s *Server) handlePreviewPath(w http.ResponseWriter, r *http.Request) {
	ws, v, err := s.preview(r.Context(), r.PathValue("token"))
	if err != nil {
		previewRefused(w, err)
		return
	}
	prefix, rest := splitPrefix(r.URL.EscapedPath(), 2)
	s.serveProxy(w, r, proxyTarget{ws: ws, svc: v, prefix: prefix, rest: rest, preview: true, fail: previewRefused})
}

// previewStatus is the HTTP status of a refused preview request, by the refusal's code.
var previewStatus = map[protocol.Code]int{
	protocol.CodeNotFound:    http.StatusNotFound,
	protocol.CodeRevoked:     http.StatusGone,
	protocol.CodeUnavailable: http.StatusServiceUnavailable,
}

// previewRefused answers a preview request that cannot be served with a small page a browser
// shows: its status, and the typed reason (also in X-Tether-Error).
func previewRefused(w http.ResponseWriter, err error) {
	e := protocol.AsError(err)
	status, ok := previewStatus[e.Code]
	if !ok {
		status = http.StatusBadGateway
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Tether-Error", string(e.Code))
	w.WriteHeader(status)
	title := html.EscapeString(http.StatusText(status))
	fmt.Fprintf(w, "<!doctype html>\n<title>%s</title>\n<h1>%d %s</h1>\n<p>%s: %s</p>\n",
		title, status, title, html.EscapeString(string(e.Code)), html.EscapeString(e.Message))
}
