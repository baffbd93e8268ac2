// Package console is the operator's web console at /ui/: its embedded page (plain JavaScript
// and CSS, nothing loaded from anywhere else), the sign-in that exchanges a token for a session
// cookie, and the sessions themselves.
//
// The page calls the REST API under /v1 with the session cookie; the controller authenticates
// such a call through Sessions.FromRequest, which also demands the session's secret in the
// X-Tether-CSRF header on every request, reads included. The controller's origin serves
// untrusted content (a service's proxy, preview links under /p/), so a cookie alone, which the
// browser attaches to any same-origin request, must never be enough to read or change anything.
//
// Sessions live in the controller's memory: a restarted controller has signed everyone out, and
// in a cluster a session is known only to the controller that made it (a balancer must keep a
// browser on one controller, or the page signs in again).
package console
