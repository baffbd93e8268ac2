package console

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/tetherhq/tether/protocol"
)

//go:embed assets
var assets embed.FS

// CSP is the page's Content-Security-Policy: its own scripts and styles only (no inline ones),
// images from itself and from blob:/data: URLs (a previewed file), requests to its own origin.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Config is what the console needs from the controller.
type Config struct {
	Sessions *Sessions
	// SignIn checks a token exactly as the API checks a bearer token and says who it is: the
	// subject the controller checks again on each request, and the name the page shows.
	SignIn func(ctx context.Context, token string) (subject, name string, err error)
	// WriteError answers with the controller's typed error body.
	WriteError func(w http.ResponseWriter, err error)
}

// SignInRequest is the body of POST /ui/session.
type SignInRequest struct {
	Token string `json:"token"`
}

// SignInResult is the answer to a sign-in: the secret the page sends in HeaderCSRF, never
// shown again (the page keeps it in memory only: a reload signs in again).
type SignInResult struct {
	CSRF      string    `json:"csrf"`
	Principal string    `json:"principal"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Handler serves /ui (a redirect), /ui/ (the page and its files) and /ui/session (sign-in and
// sign-out), each answer with the console's security headers.
func Handler(cfg Config) http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("POST /ui/session", cfg.signIn)
	mux.HandleFunc("DELETE /ui/session", cfg.signOut)
	mux.HandleFunc("GET /ui/{file...}", func(w http.ResponseWriter, r *http.Request) {
		// Only files of the page: no listing, and the same page for /ui/ and /ui/index.html
		// without the file server's redirect.
		name := r.PathValue("file")
		if name == "" {
			name = "index.html"
		}
		var b []byte
		err := fs.ErrNotExist
		if !strings.Contains(name, "/") {
			b, err = fs.ReadFile(static, name)
		}
		if err != nil {
			cfg.WriteError(w, protocol.Errorf(protocol.CodeNotFound, "no console page %q", r.URL.Path))
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	})
	return secure(mux)
}

// secure sets the console's headers on every answer under /ui.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// A page of the same origin that opens the console (a preview link's app) gets no
		// handle on its window, so it cannot read the session's secret out of it.
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a sign-in another site's page sends: a browser names the page's origin in
// Origin on every POST, and the JSON content type cannot be sent cross-site without a CORS
// preflight, which nothing here answers.
func sameOrigin(r *http.Request) error {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return protocol.Errorf(protocol.CodeInvalidArgument, "sign-in wants a JSON body (Content-Type: application/json)")
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil // not a browser's cross-site request (curl, the tests' clients)
	}
	// The host alone is compared: behind a TLS-terminating proxy the browser's origin is
	// https:// while the request reaches the controller over http.
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, r.Host) {
		return protocol.Errorf(protocol.CodePermissionDenied, "sign-in from another origin (%s) is refused", origin)
	}
	return nil
}

func (cfg Config) signIn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if err := sameOrigin(r); err != nil {
		cfg.WriteError(w, err)
		return
	}
	var req SignInRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		cfg.WriteError(w, protocol.Errorf(protocol.CodeInvalidArgument, "sign-in body: %v", err))
		return
	}
	token := strings.TrimSpace(req.Token)
	if token == "" {
		cfg.WriteError(w, protocol.Errorf(protocol.CodeInvalidArgument, "paste the operator token or an API token"))
		return
	}
	subject, name, err := cfg.SignIn(r.Context(), token)
	if err != nil {
		cfg.WriteError(w, err)
		return
	}
	// A browser signing in again leaves no session behind it: the old one's secret is gone
	// with the page that held it.
	if c, err := r.Cookie(CookieName); err == nil {
		cfg.Sessions.Delete(c.Value)
	}
	sess, err := cfg.Sessions.Create(subject, name)
	if err != nil {
		cfg.WriteError(w, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: sess.ID, Path: "/", HttpOnly: true, Secure: overTLS(r),
		SameSite: http.SameSiteStrictMode, Expires: sess.Expires, MaxAge: int(sess.Expires.Sub(sess.Created).Seconds())})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(SignInResult{CSRF: sess.CSRF, Principal: sess.Name, ExpiresAt: sess.Expires})
}

// signOut ends the session; it needs the session's secret like any other request (another
// page of the origin may not sign the operator out).
func (cfg Config) signOut(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	sess, err := cfg.Sessions.FromRequest(r)
	if err != nil {
		cfg.WriteError(w, err)
		return
	}
	cfg.Sessions.Delete(sess.ID)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, Secure: overTLS(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

// overTLS says whether the browser reached the controller over TLS: its own, or a proxy's in
// front of it that says so (a false claim only keeps the cookie from being stored over http).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
