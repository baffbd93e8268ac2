package console

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/protocol"
)

// The set is bounded: a sign-in past the bound drops expired sessions first, and is refused
// when none has expired.
func TestSessionsBounded(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	s := NewSessions(clock, time.Hour, 2)
	a, err := s.Create("operator", "operator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("operator", "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("operator", "operator"); protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("a third session of two: %v", err)
	}
	clock.Advance(time.Hour)
	if _, err := s.Create("operator", "operator"); err != nil || s.Len() != 1 {
		t.Fatalf("a sign-in after the others expired: %v, %d held", err, s.Len())
	}
	if _, ok := s.Get(a.ID); ok {
		t.Fatal("a session past its lifetime is live")
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
