package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/protocol"
)

const (
	// CookieName is the session cookie. Not __Host-: that prefix needs Secure, which a
	// controller on plain HTTP (the default, on loopback) cannot set.
	CookieName = "tether_console"
	// HeaderCSRF carries the session's secret on every request the page makes with the cookie.
	HeaderCSRF = "X-Tether-CSRF"
	// DefaultTTL is how long a session lasts from sign-in.
	DefaultTTL = 12 * time.Hour
	// DefaultMax bounds the sessions held at once; a sign-in beyond it ends the oldest.
	DefaultMax = 10000
	// PerSubject bounds the sessions of one subject (one token): a sign-in beyond it ends that
	// subject's oldest, so no token holder can fill the set and lock others out.
	PerSubject = 32

	prefixSession = "tcs_"
)

// Session is one signed-in browser.
type Session struct {
	ID   string // the cookie's value
	CSRF string // the secret the page sends in HeaderCSRF
	// Subject is who signed in, as the controller identifies it; the controller checks it again
	// on every request (an API token revoked since ends its sessions).
	Subject string
	Name    string // who signed in, as the page shows it
	Created time.Time
	Expires time.Time
}

// Sessions are the console's sessions, kept in memory.
type Sessions struct {
	clock clockwork.Clock
	ttl   time.Duration
	max   int

	mu sync.Mutex
	// m is keyed by the SHA-256 of the session id: a map lookup compares keys in variable time.
	m map[string]Session
}

// NewSessions makes an empty set of sessions lasting ttl (DefaultTTL when 0), at most max at
// once (DefaultMax when 0), on clock (the real one when nil).
func NewSessions(clock clockwork.Clock, ttl time.Duration, max int) *Sessions {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if max <= 0 {
		max = DefaultMax
	}
	return &Sessions{clock: clock, ttl: ttl, max: max, m: map[string]Session{}}
}

func randomSecret(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG does not fail on Linux
	}
	return prefix + hex.EncodeToString(b)
}

func key(id string) string {
	s := sha256.Sum256([]byte(id))
	return hex.EncodeToString(s[:])
}

// Create starts a session for subject. It never refuses: past PerSubject the subject's oldest
// session ends, past the set's bound the oldest of all.
func (s *Sessions) Create(subject, name string) (Session, error) {
	now := s.clock.Now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.countLocked(subject) >= PerSubject {
		s.dropOldestLocked(subject)
	}
	if len(s.m) >= s.max {
		s.sweepLocked(now)
	}
	if len(s.m) >= s.max {
		s.dropOldestLocked("")
	}
	sess := Session{ID: randomSecret(prefixSession), CSRF: randomSecret(""), Subject: subject, Name: name,
		Created: now, Expires: now.Add(s.ttl)}
	s.m[key(sess.ID)] = sess
	return sess, nil
}

func (s *Sessions) countLocked(subject string) int {
	n := 0
	for _, v := range s.m {
		if v.Subject == subject {
			n++
		}
	}
	return n
}

// dropOldestLocked ends the oldest session of subject ("": of anyone).
func (s *Sessions) dropOldestLocked(subject string) {
	oldest := ""
	var at time.Time
	for k, v := range s.m {
		if subject != "" && v.Subject != subject {
			continue
		}
		if oldest == "" || v.Created.Before(at) {
			oldest, at = k, v.Created
		}
	}
	if oldest != "" {
		delete(s.m, oldest)
	}
}

// sweepLocked drops the expired sessions.
func (s *Sessions) sweepLocked(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.Expires) {
			delete(s.m, k)
		}
	}
}

// Get returns the live session of that id.
func (s *Sessions) Get(id string) (Session, bool) {
	k := key(id)
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[k]
	if ok && !now.Before(sess.Expires) {
		delete(s.m, k)
		return Session{}, false
	}
	return sess, ok
}

// Delete ends the session of that id (nothing when there is none).
func (s *Sessions) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key(id))
}

// Len is how many sessions are held (expired ones not yet dropped included).
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// HasCookie says whether r carries a session cookie at all: the controller then authenticates
// it by the session, not as a call without credentials.
func HasCookie(r *http.Request) bool {
	_, err := r.Cookie(CookieName)
	return err == nil
}

// FromRequest is the live session r's cookie names, provided r also carries that session's
// secret in HeaderCSRF (compared in constant time): unauthorized when the session is unknown,
// ended or expired; permission_denied when the secret is missing or wrong.
func (s *Sessions) FromRequest(r *http.Request) (Session, error) {
	// Every cookie of the name is tried: another page of the origin may set one of its own on a
	// longer path, which the browser sends first.
	got := r.Header.Get(HeaderCSRF)
	var live *Session
	for _, c := range r.CookiesNamed(CookieName) {
		sess, ok := s.Get(c.Value)
		if !ok {
			continue
		}
		if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) == 1 {
			return sess, nil
		}
		live = &sess
	}
	if len(r.CookiesNamed(CookieName)) == 0 {
		return Session{}, protocol.Errorf(protocol.CodeUnauthorized, "no console session: sign in at /ui/")
	}
	if live == nil {
		return Session{}, protocol.Errorf(protocol.CodeUnauthorized, "the console session ended (signed out, expired, or the controller restarted): sign in again at /ui/")
	}
	return Session{}, protocol.Errorf(protocol.CodePermissionDenied, "a request with the console's session cookie must carry the session's %s header", HeaderCSRF)
}
