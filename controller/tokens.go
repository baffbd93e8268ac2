package controller

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/console"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// API tokens are credentials for the REST API kept in the store, so that every controller of a
// cluster accepts them, and that may be limited to some workspaces (see principal). The
// operator token in the data directory stays the local bootstrap credential: it makes the first
// API token.

// newAPISecret is a fresh API token secret: the prefix and 32 random bytes, base64url.
func newAPISecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG does not fail on Linux
	}
	return prefixAPI + base64.RawURLEncoding.EncodeToString(b)
}

// errWrongToken is the one answer to a credential that is not accepted for any reason the
// caller may not learn (absent, unknown, malformed).
func errWrongToken() error {
	return protocol.Errorf(protocol.CodeUnauthorized, "missing or wrong token: the operator token or an API token is needed")
}

// authenticate finds who a REST call is from: the operator token, or a live API token (neither
// revoked nor expired by the controller's clock), as a bearer token; without one, the web
// console's session cookie (consoleauth.go).
func (s *Server) authenticate(r *http.Request) (principal, error) {
	t := bearer(r)
	if t == "" && console.HasCookie(r) {
		return s.sessionPrincipal(r)
	}
	p, _, err := s.tokenPrincipal(r.Context(), t)
	return p, err
}

// tokenPrincipal checks a token and returns who it is, with the subject a console session
// remembers it by: "operator", or "api:" and the API token's hash.
func (s *Server) tokenPrincipal(ctx context.Context, t string) (principal, string, error) {
	if t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.operatorToken)) == 1 {
		return principal{}, subjectOperator, nil
	}
	if !strings.HasPrefix(t, prefixAPI) {
		return principal{}, "", errWrongToken()
	}
	// Looked up by its hash: the store holds no secret, and the index lookup learns nothing
	// about the secret from how long it takes.
	hash := hashToken(t)
	p, err := s.apiTokenPrincipal(ctx, hash)
	return p, subjectAPI + hash, err
}

// apiTokenPrincipal is who the API token of that hash is, if it is live.
func (s *Server) apiTokenPrincipal(ctx context.Context, hash string) (principal, error) {
	tok, err := s.store.TokenByHash(ctx, hash)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return principal{}, errWrongToken()
	}
	if err != nil {
		return principal{}, err
	}
	if subtle.ConstantTimeCompare([]byte(hash), []byte(tok.Hash)) != 1 {
		return principal{}, errWrongToken()
	}
	now := s.now()
	switch {
	case !tok.RevokedAt.IsZero():
		return principal{}, protocol.Errorf(protocol.CodeUnauthorized, "API token %q was revoked at %s", tok.Name, tok.RevokedAt.Format(time.RFC3339))
	case !tok.ExpiresAt.IsZero() && !now.Before(tok.ExpiresAt):
		return principal{}, protocol.Errorf(protocol.CodeUnauthorized, "API token %q expired at %s", tok.Name, tok.ExpiresAt.Format(time.RFC3339))
	}
	p := principal{token: tok.Name}
	if len(tok.Workspaces) > 0 {
		p.workspaces = make(map[string]bool, len(tok.Workspaces))
		for _, id := range tok.Workspaces {
			p.workspaces[id] = true
		}
	}
	return p, nil
}

func (s *Server) handleTokenCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	tok, err := s.CreateToken(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, tok)
}

// CreateToken records a new API token and returns it with its secret, which nothing shows
// again. The workspaces it is limited to must exist (names are recorded as their ids, so a
// later workspace of the same name is not the token's).
func (s *Server) CreateToken(ctx context.Context, req api.CreateTokenRequest) (api.Token, error) {
	if !workspaceName.MatchString(req.Name) {
		return api.Token{}, protocol.Errorf(protocol.CodeInvalidArgument,
			"invalid token name %q: use letters, digits, '.', '_' and '-', at most 63", req.Name)
	}
	ttl, err := parseDuration("ttl", req.TTL, 0)
	if err != nil {
		return api.Token{}, err
	}
	now := s.now()
	t := store.Token{Name: req.Name, Workspaces: []string{}, CreatedAt: now}
	if ttl > 0 {
		t.ExpiresAt = now.Add(ttl)
	}
	seen := map[string]bool{}
	for _, name := range req.Workspaces {
		ws, err := s.workspace(ctx, name)
		if err == nil && ws.State == api.StateDeleted {
			err = protocol.Errorf(protocol.CodeNotFound, "workspace %q was deleted", name)
		}
		if err != nil {
			return api.Token{}, err
		}
		if !seen[ws.ID] {
			seen[ws.ID] = true
			t.Workspaces = append(t.Workspaces, ws.ID)
		}
	}
	secret := newAPISecret()
	t.Hash = hashToken(secret)
	if err := s.store.CreateToken(ctx, t); err != nil {
		return api.Token{}, err
	}
	s.log.Info("api token created", "token", t.Name, "workspaces", t.Workspaces, "expires", t.ExpiresAt, "by", principalOf(ctx).String())
	out := apiToken(t, now)
	out.Token = secret
	return out, nil
}

func (s *Server) handleTokenList(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.ListTokens(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	now := s.now()
	out := make([]api.Token, 0, len(list))
	for _, t := range list {
		out = append(out, apiToken(t, now))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleTokenRevoke revokes the live token of that name: every call with it is refused from
// now on, on every controller of the store.
func (s *Server) handleTokenRevoke(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.store.RevokeToken(r.Context(), name, s.now()); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("api token revoked", "token", name, "by", principalOf(r.Context()).String())
	w.WriteHeader(http.StatusNoContent)
}

// apiToken is what the API shows of t: never its hash.
func apiToken(t store.Token, now time.Time) api.Token {
	out := api.Token{Name: t.Name, Workspaces: t.Workspaces, CreatedAt: t.CreatedAt}
	if out.Workspaces == nil {
		out.Workspaces = []string{}
	}
	if !t.ExpiresAt.IsZero() {
		at := t.ExpiresAt
		out.ExpiresAt, out.Expired = &at, !now.Before(at)
	}
	if !t.RevokedAt.IsZero() {
		at := t.RevokedAt
		out.RevokedAt, out.Revoked = &at, true
	}
	return out
}
