package controller

import (
	"context"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/controller/console"
	"github.com/tetherhq/tether/protocol"
)

// The web console's sessions as the API sees them: a session remembers who signed in by a
// subject, and every request made with its cookie is checked again from that subject, so an
// API token revoked or expired since the sign-in ends its sessions at their next request.
const (
	subjectOperator = "operator"
	subjectAPI      = "api:"
)

// consoleHandler serves /ui and /ui/ (console.Handler) with the controller's sign-in.
func (s *Server) consoleHandler() http.Handler {
	return console.Handler(console.Config{Sessions: s.consoleSessions, SignIn: s.consoleSignIn, WriteError: writeError})
}

// consoleSignIn checks a pasted token exactly as a bearer token is checked.
func (s *Server) consoleSignIn(ctx context.Context, token string) (subject, name string, err error) {
	p, subject, err := s.tokenPrincipal(ctx, token)
	if err != nil {
		return "", "", err
	}
	return subject, p.String(), nil
}

// sessionPrincipal authenticates a request by its console session (cookie and secret header).
func (s *Server) sessionPrincipal(r *http.Request) (principal, error) {
	sess, err := s.consoleSessions.FromRequest(r)
	if err != nil {
		return principal{}, err
	}
	if sess.Subject == subjectOperator {
		return principal{}, nil
	}
	hash, ok := strings.CutPrefix(sess.Subject, subjectAPI)
	if !ok {
		return principal{}, errWrongToken()
	}
	p, err := s.apiTokenPrincipal(r.Context(), hash)
	if protocol.CodeOf(err) == protocol.CodeUnauthorized {
		// Revoked, expired or gone: the session ends with its token.
		s.consoleSessions.Delete(sess.ID)
	}
	return p, err
}
