package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/console"
	"github.com/tetherhq/tether/protocol"
)

// consoleCall is one request to the test controller with the console's cookie and secret
// header (each when not empty), and no bearer token.
func (tc *testController) consoleCall(t *testing.T, method, path, cookie, csrf, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, tc.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: cookie})
	}
	if csrf != "" {
		req.Header.Set(console.HeaderCSRF, csrf)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := oneShot().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// oneShot is an HTTP client keeping no connection open (the leak check would see it), and
// following no redirect.
func oneShot() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// doClosed sends req and closes the answer's body.
func doClosed(req *http.Request) (*http.Response, error) {
	resp, err := oneShot().Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// signIn exchanges token for a session and returns its cookie's value and secret.
func (tc *testController) signIn(t *testing.T, token string) (cookie, csrf string, c *http.Cookie) {
	t.Helper()
	body, _ := json.Marshal(console.SignInRequest{Token: token})
	resp, out := tc.consoleCall(t, "POST", "/ui/session", "", "", string(body))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in: %s %s", resp.Status, out)
	}
	var res console.SignInResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.CSRF == "" {
		t.Fatalf("sign-in answered %q: %v", out, err)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName {
			return ck.Value, res.CSRF, ck
		}
	}
	t.Fatalf("sign-in set no %s cookie: %v", console.CookieName, resp.Header["Set-Cookie"])
	return "", "", nil
}

func wantRefusal(t *testing.T, what string, resp *http.Response, body string, status int, code protocol.Code) {
	t.Helper()
	var eb api.ErrorBody
	if resp.StatusCode != status || json.Unmarshal([]byte(body), &eb) != nil || eb.Error.Code != code {
		t.Fatalf("%s: %s %s; want %d %s", what, resp.Status, body, status, code)
	}
}

func TestConsolePageHeaders(t *testing.T) {
	tc := newTestController(t)
	resp, _ := tc.consoleCall(t, "GET", "/ui", "", "", "")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/ui", "/ui/", "/ui/app.js", "/ui/lib.js", "/ui/files.js", "/ui/workspace.js", "/ui/style.css", "/ui/nothing.js", "/ui/session"} {
		resp, body := tc.consoleCall(t, "GET", p, "", "", "")
		h := resp.Header
		if h.Get("Content-Security-Policy") != console.CSP || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("GET %s: headers %v", p, h)
		}
		switch {
		case p == "/ui/nothing.js" || p == "/ui/session":
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("GET %s: %s %s", p, resp.Status, body)
			}
		case p == "/ui/":
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
				t.Fatalf("GET /ui/: %s %s", resp.Status, h.Get("Content-Type"))
			}
			// The CSP forbids inline scripts and styles: the page has none.
			for _, re := range []string{`<script(?:\s[^>]*)?>[^<]`, `<style`, `\sstyle=`, `\son[a-z]+=`, `javascript:`} {
				if regexp.MustCompile(re).MatchString(body) {
					t.Fatalf("the page has inline code (%s):\n%s", re, body)
				}
			}
			scripts := regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1)
			for _, tag := range scripts {
				if !strings.Contains(tag, ` src="`) {
					t.Fatalf("an inline script: %s", tag)
				}
			}
			if len(scripts) == 0 {
				t.Fatalf("the page loads no script:\n%s", body)
			}
		case strings.HasSuffix(p, ".js"):
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") {
				t.Fatalf("GET %s: %s %s", p, resp.Status, h.Get("Content-Type"))
			}
			// Workspace text goes in as text: no script assigns HTML.
			if strings.Contains(body, "innerHTML") || strings.Contains(body, "outerHTML") || strings.Contains(body, "insertAdjacentHTML") || strings.Contains(body, "document.write") {
				t.Fatalf("%s assigns HTML", p)
			}
		}
	}
}

func TestConsoleSessionAndCSRF(t *testing.T) {
	tc := newTestController(t)
	op := tc.s.OperatorToken()

	// Sign-in checks the token as the API does, and refuses what a cross-site page could send.
	resp, body := tc.consoleCall(t, "POST", "/ui/session", "", "", `{"token":"tot_wrong"}`)
	wantRefusal(t, "a wrong token", resp, body, http.StatusUnauthorized, protocol.CodeUnauthorized)
	resp, body = tc.consoleCall(t, "POST", "/ui/session", "", "", `{"token":""}`)
	wantRefusal(t, "no token", resp, body, http.StatusBadRequest, protocol.CodeInvalidArgument)
	req, _ := http.NewRequest("POST", tc.url+"/ui/session", strings.NewReader("token="+op))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if r, err := doClosed(req); err != nil || r.StatusCode != http.StatusBadRequest || len(r.Cookies()) != 0 {
		t.Fatalf("a form post signed in: %v %v", r, err)
	}
	req, _ = http.NewRequest("POST", tc.url+"/ui/session", strings.NewReader(`{"token":"`+op+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	if r, err := doClosed(req); err != nil || r.StatusCode != http.StatusForbidden || len(r.Cookies()) != 0 {
		t.Fatalf("a sign-in from another origin: %v %v", r, err)
	}
	if n := tc.s.consoleSessions.Len(); n != 0 {
		t.Fatalf("refused sign-ins left %d sessions", n)
	}

	cookie, csrf, c := tc.signIn(t, op)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge != int(console.DefaultTTL/time.Second) {
		t.Fatalf("session cookie %+v", c)
	}

	// The cookie with its secret is the operator.
	resp, body = tc.consoleCall(t, "GET", "/v1/tokens", cookie, csrf, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/tokens with the session: %s %s", resp.Status, body)
	}
	// Without the secret, or with another, nothing is read or changed.
	for _, bad := range []string{"", csrf + "x", strings.ToUpper(csrf)} {
		resp, body = tc.consoleCall(t, "GET", "/v1/tokens", cookie, bad, "")
		wantRefusal(t, "a read without the secret", resp, body, http.StatusForbidden, protocol.CodePermissionDenied)
		resp, body = tc.consoleCall(t, "POST", "/v1/tokens", cookie, bad, `{"name":"sneaky"}`)
		wantRefusal(t, "a write without the secret", resp, body, http.StatusForbidden, protocol.CodePermissionDenied)
	}
	toks, err := tc.apiClient(t, op).ListTokens(context.Background())
	if err != nil || len(toks) != 0 {
		t.Fatalf("a refused write made a token: %+v %v", toks, err)
	}
	resp, body = tc.consoleCall(t, "POST", "/v1/tokens", cookie, csrf, `{"name":"made-in-console"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("a write with the secret: %s %s", resp.Status, body)
	}

	// A bearer request is unaffected by a cookie it carries.
	req, _ = http.NewRequest("GET", tc.url+"/v1/tokens", nil)
	req.Header.Set("Authorization", protocol.Bearer(op))
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: "tcs_garbage"})
	if r, err := doClosed(req); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("bearer with a stray cookie: %v %v", r, err)
	}

	// Sign-out needs the secret too, then the session is gone.
	resp, body = tc.consoleCall(t, "DELETE", "/ui/session", cookie, "", "")
	wantRefusal(t, "sign-out without the secret", resp, body, http.StatusForbidden, protocol.CodePermissionDenied)
	resp, _ = tc.consoleCall(t, "DELETE", "/ui/session", cookie, csrf, "")
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out: %s %v", resp.Status, resp.Header["Set-Cookie"])
	}
	resp, body = tc.consoleCall(t, "GET", "/v1/tokens", cookie, csrf, "")
	wantRefusal(t, "a signed-out session", resp, body, http.StatusUnauthorized, protocol.CodeUnauthorized)
	resp, body = tc.consoleCall(t, "POST", "/v1/tokens", cookie, csrf, `{"name":"after-signout"}`)
	wantRefusal(t, "a write of a signed-out session", resp, body, http.StatusUnauthorized, protocol.CodeUnauthorized)

	// Signing in again replaces the browser's old session.
	cookie, _, _ = tc.signIn(t, op)
	body2, _ := json.Marshal(console.SignInRequest{Token: op})
	req, _ = http.NewRequest("POST", tc.url+"/ui/session", strings.NewReader(string(body2)))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: cookie})
	if r, err := doClosed(req); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("second sign-in: %v %v", r, err)
	}
	if n := tc.s.consoleSessions.Len(); n != 1 {
		t.Fatalf("%d sessions after signing in again; want 1", n)
	}
}

// Over TLS the cookie is Secure.
func TestConsoleCookieSecureOverTLS(t *testing.T) {
	tc := newTestController(t)
	req := httptest.NewRequest("POST", "https://ctl.example/ui/session", strings.NewReader(`{"token":"`+tc.s.OperatorToken()+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://ctl.example")
	req.TLS = &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	tc.s.Handler().ServeHTTP(rec, req)
	cs := rec.Result().Cookies()
	if rec.Code != http.StatusOK || len(cs) != 1 || !cs[0].Secure || !cs[0].HttpOnly {
		t.Fatalf("sign-in over TLS: %d %v", rec.Code, rec.Header()["Set-Cookie"])
	}

	// Behind a proxy that ends TLS (deploy/README.md): the browser's origin is https://, the
	// request reaches the controller over http and the proxy says so.
	req = httptest.NewRequest("POST", "http://ctl.example/ui/session", strings.NewReader(`{"token":"`+tc.s.OperatorToken()+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://ctl.example")
	req.Header.Set("X-Forwarded-Proto", "https")
	rec = httptest.NewRecorder()
	tc.s.Handler().ServeHTTP(rec, req)
	cs = rec.Result().Cookies()
	if rec.Code != http.StatusOK || len(cs) != 1 || !cs[0].Secure {
		t.Fatalf("sign-in behind a TLS proxy: %d %s %v", rec.Code, rec.Body, rec.Header()["Set-Cookie"])
	}
	// Another host's page is still refused.
	req = httptest.NewRequest("POST", "http://ctl.example/ui/session", strings.NewReader(`{"token":"`+tc.s.OperatorToken()+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	rec = httptest.NewRecorder()
	tc.s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("sign-in from another host: %d", rec.Code)
	}
}

// An API token's sessions end with it (revoked, or expired by the controller's clock), and a
// session ends after its lifetime.
func TestConsoleSessionFollowsToken(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	ctx := context.Background()
	mine := tc.addAllocation(t, "mine")
	other := tc.addAllocation(t, "other")
	op := tc.apiClient(t, tc.s.OperatorToken())
	limited, err := op.CreateToken(ctx, api.CreateTokenRequest{Name: "limited", Workspaces: []string{mine.workspaceID}, TTL: "24h"})
	if err != nil {
		t.Fatal(err)
	}

	cookie, csrf, _ := tc.signIn(t, limited.Token)
	resp, body := tc.consoleCall(t, "GET", "/v1/workspaces", cookie, csrf, "")
	var list []api.Workspace
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 || list[0].ID != mine.workspaceID {
		t.Fatalf("the limited token's session lists %s %s", resp.Status, body)
	}
	resp, body = tc.consoleCall(t, "GET", "/v1/workspaces/"+other.workspaceID, cookie, csrf, "")
	wantRefusal(t, "another workspace through a limited session", resp, body, http.StatusNotFound, protocol.CodeNotFound)

	if err := op.RevokeToken(ctx, "limited"); err != nil {
		t.Fatal(err)
	}
	resp, body = tc.consoleCall(t, "GET", "/v1/workspaces", cookie, csrf, "")
	wantRefusal(t, "a revoked token's session", resp, body, http.StatusUnauthorized, protocol.CodeUnauthorized)
	if n := tc.s.consoleSessions.Len(); n != 0 {
		t.Fatalf("the revoked token's session is still held (%d)", n)
	}

	// The operator's session lasts its lifetime, by the controller's clock.
	cookie, csrf, _ = tc.signIn(t, tc.s.OperatorToken())
	clock.Advance(console.DefaultTTL - time.Second)
	if resp, body := tc.consoleCall(t, "GET", "/v1/workspaces", cookie, csrf, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("a session before its end: %s %s", resp.Status, body)
	}
	clock.Advance(time.Second)
	resp, body = tc.consoleCall(t, "GET", "/v1/workspaces", cookie, csrf, "")
	wantRefusal(t, "an expired session", resp, body, http.StatusUnauthorized, protocol.CodeUnauthorized)
}
