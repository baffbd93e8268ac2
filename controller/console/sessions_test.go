package console

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/protocol"
)

// The set is bounded and never refuses a sign-in: past its bound the oldest session ends, and
// past PerSubject the subject's own oldest, so one token's holder cannot lock others out.
func TestSessionsBounded(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	s := NewSessions(clock, time.Hour, 2)
	a, err := s.Create("operator", "operator")
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	b, err := s.Create("api:x", "x")
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if _, err := s.Create("api:y", "y"); err != nil || s.Len() != 2 {
		t.Fatalf("a third session of two: %v, %d held", err, s.Len())
	}
	if _, ok := s.Get(a.ID); ok {
		t.Fatal("the oldest session outlived a sign-in past the bound")
	}
	if _, ok := s.Get(b.ID); !ok {
		t.Fatal("a newer session ended instead of the oldest")
	}
	clock.Advance(time.Hour)
	if _, err := s.Create("operator", "operator"); err != nil || s.Len() != 1 {
		t.Fatalf("a sign-in after the others expired: %v, %d held", err, s.Len())
	}

	// One subject's flood ends only its own sessions.
	s = NewSessions(clock, time.Hour, 0)
	op, _ := s.Create("operator", "operator")
	var first Session
	for i := range PerSubject + 5 {
		clock.Advance(time.Millisecond)
		sess, err := s.Create("api:agent", "agent")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = sess
		}
	}
	if _, ok := s.Get(op.ID); !ok {
		t.Fatal("a token's flood of sign-ins ended the operator's session")
	}
	if _, ok := s.Get(first.ID); ok || s.Len() != PerSubject+1 {
		t.Fatalf("the flooding subject holds more than %d sessions (%d held)", PerSubject, s.Len())
	}
}

// A cookie of the same name another page of the origin planted on a longer path (sent first)
// does not hide the real session.
func TestFromRequestPlantedCookie(t *testing.T) {
	s := NewSessions(nil, 0, 0)
	sess, _ := s.Create("operator", "operator")
	r := httptest.NewRequest("GET", "/v1/workspaces", nil)
	r.Header.Set("Cookie", CookieName+"=planted; "+CookieName+"="+sess.ID)
	r.Header.Set(HeaderCSRF, sess.CSRF)
	if got, err := s.FromRequest(r); err != nil || got.ID != sess.ID {
		t.Fatalf("planted cookie first: %v", err)
	}
	other, _ := s.Create("operator", "operator")
	r.Header.Set("Cookie", CookieName+"="+other.ID+"; "+CookieName+"="+sess.ID)
	r.Header.Set(HeaderCSRF, other.CSRF[:10])
	if _, err := s.FromRequest(r); protocol.CodeOf(err) != protocol.CodePermissionDenied {
		t.Fatalf("two live sessions, no matching secret: %v", err)
	}
}

func TestFromRequest(t *testing.T) {
	s := NewSessions(nil, 0, 0)
	sess, err := s.Create("operator", "operator")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cookie, csrf string
		want         protocol.Code
	}{
		{"", sess.CSRF, protocol.CodeUnauthorized},
		{"tcs_unknown", sess.CSRF, protocol.CodeUnauthorized},
		{sess.ID, "", protocol.CodePermissionDenied},
		{sess.ID, sess.CSRF[1:], protocol.CodePermissionDenied},
		{sess.ID, sess.CSRF, ""},
	} {
		r := httptest.NewRequest("GET", "/v1/workspaces", nil)
		if c.cookie != "" {
			r.Header.Set("Cookie", CookieName+"="+c.cookie)
		}
		if c.csrf != "" {
			r.Header.Set(HeaderCSRF, c.csrf)
		}
		got, err := s.FromRequest(r)
		if (err == nil) != (c.want == "") || (err != nil && protocol.CodeOf(err) != c.want) || (err == nil && got.ID != sess.ID) {
			t.Fatalf("cookie %q, secret %q: %+v %v; want %q", c.cookie, c.csrf, got, err, c.want)
		}
	}
}
