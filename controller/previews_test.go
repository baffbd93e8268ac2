package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// previewFixture is a workspace with a ready service "web" (whose runner is not connected)
// and a stopped one "db".
func previewFixture(t *testing.T, tc *testController) api.Workspace {
	t.Helper()
	ctx := context.Background()
	now := tc.s.now()
	ws := api.Workspace{ID: newID("ws_"), Name: "pv", Provider: "local", State: api.StateReady,
		AllocationID: newID("al_"), CreatedAt: now, UpdatedAt: now}
	al := store.Allocation{ID: ws.AllocationID, WorkspaceID: ws.ID, Provider: "local", State: store.AllocStarting,
		BootstrapHash: hashToken(newToken(prefixBootstrap)), CreatedAt: now, UpdatedAt: now}
	if err := tc.s.store.CreateWorkspace(ctx, ws, al); err != nil {
		t.Fatal(err)
	}
	for _, v := range []api.Service{
		{WorkspaceID: ws.ID, Name: "web", State: protocol.ServiceReady, Port: 41234, UpdatedAt: now},
		{WorkspaceID: ws.ID, Name: "db", State: protocol.ServiceStopped, Port: 41235, UpdatedAt: now},
	} {
		if err := tc.s.store.PutService(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// get makes a GET without any credential (as a browser with a preview link) and does not
// follow redirects.
func get(t *testing.T, url string, host string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// enterPreviewHost follows a host-form link's entry on the preview listener at phURL and returns
// the cookie it set.
func enterPreviewHost(t *testing.T, phURL, label, token string) *http.Cookie {
	t.Helper()
	resp, page := get(t, phURL+previewEnterPath+"?t="+token, label+".preview.test")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("entry: %s %q; want 303 to /", resp.Status, page)
	}
	for _, c := range resp.Cookies() {
		if c.Name == previewCookie && c.Value == token && c.HttpOnly {
			return c
		}
	}
	t.Fatalf("entry set no HttpOnly %s cookie: %v", previewCookie, resp.Cookies())
	return nil
}

func wantPage(t *testing.T, what string, resp *http.Response, body string, status int, code protocol.Code, words string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("X-Tether-Error") != string(code) ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, words) {
		t.Fatalf("%s: %d %q %s; want %d %s with %q", what, resp.StatusCode, resp.Header.Get("X-Tether-Error"), body, status, code, words)
	}
}

func TestPreviewLinks(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tc := newTestController(t, withClock(clock))
	tc.s.advertise = tc.url
	ws := previewFixture(t, tc)
	op := tc.s.OperatorToken()
	base := "/v1/workspaces/" + ws.ID + "/services/"

	// Bad input.
	for _, ttl := range []string{"0s", "-1s", "169h", "soon"} {
		status, body := tc.call(t, http.MethodPost, base+"web/previews", op, `{"ttl":"`+ttl+`"}`)
		if status != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) {
			t.Errorf("ttl %s: %d %s; want invalid_argument", ttl, status, body)
		}
	}
	if status, body := tc.call(t, http.MethodPost, base+"db/previews", op, `{}`); status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
		t.Errorf("preview of a stopped service: %d %s; want unavailable", status, body)
	}
	if status, body := tc.call(t, http.MethodPost, base+"nosuch/previews", op, `{}`); status != http.StatusNotFound || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("preview of no service: %d %s; want not_found", status, body)
	}

	// A link: its token is 32 lowercase base32 characters, shown once.
	status, body := tc.call(t, http.MethodPost, base+"web/previews", op, `{"ttl":"1m"}`)
	if status != http.StatusCreated {
		t.Fatalf("create a preview: %d %s", status, body)
	}
	var p api.Preview
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSuffix(strings.TrimPrefix(p.URL, tc.url+"/p/"), "/")
	if p.URL != p.PathURL || !validPreviewToken(token) || p.State != "live" || !p.ExpiresAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("preview: %+v", p)
	}
	if status, body := tc.call(t, http.MethodGet, base+"web/previews", op, ""); status != http.StatusOK || strings.Contains(body, token) || !strings.Contains(body, p.ID) {
		t.Fatalf("preview list: %d %s; want the link listed without its token", status, body)
	}

	// Served without the operator token. The runner is not connected, so the dial fails:
	// unavailable, as a page.
	resp, page := get(t, tc.url+"/p/"+token+"/x?y=1", "")
	wantPage(t, "a live link to a service whose runner is away", resp, page, http.StatusServiceUnavailable, protocol.CodeUnavailable, "not connected")
	if resp, _ := get(t, tc.url+"/p/"+token+"?a=b", ""); resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/p/"+token+"/?a=b" {
		t.Fatalf("/p/TOKEN without a slash: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Unknown and malformed tokens get the same page.
	resp, page = get(t, tc.url+"/p/"+newPreviewToken()+"/", "")
	wantPage(t, "an unknown token", resp, page, http.StatusNotFound, protocol.CodeNotFound, "no such preview link")
	resp, page2 := get(t, tc.url+"/p/NOT-A-TOKEN/", "")
	wantPage(t, "a malformed token", resp, page2, http.StatusNotFound, protocol.CodeNotFound, "no such preview link")
	if page != page2 {
		t.Errorf("unknown and malformed tokens answer differently:\n%s\n%s", page, page2)
	}
	// A preview token is no API credential.
	if status, body := tc.call(t, http.MethodGet, base+"web/proxy/", token, ""); status != http.StatusUnauthorized {
		t.Errorf("a preview token on the operator's proxy: %d %s; want unauthorized", status, body)
	}

	// The service not ready: refused.
	if err := tc.s.store.PutService(context.Background(), api.Service{WorkspaceID: ws.ID, Name: "web", State: protocol.ServiceFailed, Port: 41234, UpdatedAt: tc.s.now()}); err != nil {
		t.Fatal(err)
	}
	resp, page = get(t, tc.url+"/p/"+token+"/", "")
	wantPage(t, "a link to a failed service", resp, page, http.StatusServiceUnavailable, protocol.CodeUnavailable, "service web is failed")
	if err := tc.s.store.PutService(context.Background(), api.Service{WorkspaceID: ws.ID, Name: "web", State: protocol.ServiceReady, Port: 41234, UpdatedAt: tc.s.now()}); err != nil {
		t.Fatal(err)
	}

	// Expired by the controller's clock.
	clock.Advance(time.Minute)
	resp, page = get(t, tc.url+"/p/"+token+"/", "")
	wantPage(t, "an expired link", resp, page, http.StatusGone, protocol.CodeRevoked, "expired")

	// Revoked.
	status, body = tc.call(t, http.MethodPost, base+"web/previews", op, `{}`)
	if status != http.StatusCreated {
		t.Fatalf("create a preview: %d %s", status, body)
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	token = strings.TrimSuffix(strings.TrimPrefix(p.URL, tc.url+"/p/"), "/")
	if !p.ExpiresAt.Equal(clock.Now().Add(DefaultPreviewTTL)) {
		t.Fatalf("default ttl: %+v", p)
	}
	if status, body := tc.call(t, http.MethodDelete, base+"web/previews", op, ""); status != http.StatusOK || !strings.Contains(body, `"revoked":1`) {
		t.Fatalf("revoke: %d %s; want 1 revoked (the expired one is not live)", status, body)
	}
	resp, page = get(t, tc.url+"/p/"+token+"/", "")
	wantPage(t, "a revoked link", resp, page, http.StatusGone, protocol.CodeRevoked, "revoked")

	// The preview host: {label}.DOMAIN names the link by its id; the secret comes in the entry
	// path's query, never in the host name.
	tc.s.cfg.PreviewDomain = "preview.test"
	ph := httptest.NewServer(tc.s.previewHost())
	defer ph.Close()
	resp, page = get(t, ph.URL+previewEnterPath+"?t="+token, previewLabel(p.ID)+".preview.test:8080")
	wantPage(t, "a revoked link on the preview host", resp, page, http.StatusGone, protocol.CodeRevoked, "revoked")
	resp, page = get(t, ph.URL+"/", token+".preview.test:8080")
	wantPage(t, "the secret as a host name", resp, page, http.StatusNotFound, protocol.CodeNotFound, "no such preview link")
	resp, page = get(t, ph.URL+"/", token+".elsewhere.test")
	wantPage(t, "another domain on the preview host", resp, page, http.StatusNotFound, protocol.CodeNotFound, "no such preview link")
}

// The operator's proxy refuses what it cannot reach, as the API does.
func TestServiceProxyRefusals(t *testing.T) {
	tc := newTestController(t)
	ws := previewFixture(t, tc)
	op := tc.s.OperatorToken()
	base := "/v1/workspaces/" + ws.ID + "/services/"
	for _, c := range []struct {
		path   string
		status int
		code   protocol.Code
	}{
		{base + "db/proxy/", http.StatusServiceUnavailable, protocol.CodeUnavailable},
		{base + "nosuch/proxy/x", http.StatusNotFound, protocol.CodeNotFound},
		{base + "web/proxy/x", http.StatusServiceUnavailable, protocol.CodeUnavailable}, // its runner is away
		{"/v1/workspaces/ws_00000000deadbeef/services/web/proxy/", http.StatusNotFound, protocol.CodeNotFound},
	} {
		for _, m := range []string{http.MethodGet, http.MethodPost, "PROPFIND"} {
			status, body := tc.call(t, m, c.path, op, "")
			if status != c.status || !strings.Contains(body, `"code":"`+string(c.code)+`"`) {
				t.Errorf("%s %s: %d %s; want %d %s", m, c.path, status, body, c.status, c.code)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, tc.url+base+"web/proxy?q=1", nil)
	req.Header.Set("Authorization", protocol.Bearer(op))
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != base+"web/proxy/?q=1" {
		t.Fatalf("/proxy without a slash: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestSplitPrefix(t *testing.T) {
	for _, c := range []struct {
		in           string
		n            int
		prefix, rest string
	}{
		{"/v1/workspaces/ws_1/services/web/proxy/a/b%2Fc", 6, "/v1/workspaces/ws_1/services/web/proxy", "/a/b%2Fc"},
		{"/v1/workspaces/ws_1/services/web/proxy/", 6, "/v1/workspaces/ws_1/services/web/proxy", "/"},
		{"/v1/workspaces/ws_1/services/web/proxy", 6, "/v1/workspaces/ws_1/services/web/proxy", "/"},
		{"/p/tok/index.html", 2, "/p/tok", "/index.html"},
		{"/p/tok//x", 2, "/p/tok", "//x"},
	} {
		if p, r := splitPrefix(c.in, c.n); p != c.prefix || r != c.rest {
			t.Errorf("splitPrefix(%q, %d) = %q, %q; want %q, %q", c.in, c.n, p, r, c.prefix, c.rest)
		}
	}
}

func TestRewriteLocation(t *testing.T) {
	const up, prefix = "localhost:5173", "/p/tok"
	for _, c := range []struct{ in, want string }{
		{"/login?next=/a", "/p/tok/login?next=/a"},
		{"/p/tok/login", "/p/tok/login"}, // an app that honours X-Forwarded-Prefix
		{"http://localhost:5173/x#f", "/p/tok/x#f"},
		{"http://127.0.0.1:5173/", "/p/tok/"},
		{"https://example.com/x", "https://example.com/x"},
		{"next", "next"},
		{"//example.com/x", "//example.com/x"},
	} {
		if got := rewriteLocation(c.in, up, prefix, ""); got != c.want {
			t.Errorf("rewriteLocation(%q) = %q; want %q", c.in, got, c.want)
		}
	}
	if got := rewriteLocation("http://localhost:5173/x", up, "", ""); got != "/x" {
		t.Errorf("on the preview host: %q; want /x", got)
	}
}

// A port that is not one of the workspace's services' nor the operator's is refused before
// anything is dialed; a stopped service's port is unavailable.
func TestDialPortRule(t *testing.T) {
	tc := newTestController(t)
	ws := previewFixture(t, tc)
	ctx := context.Background()
	for _, c := range []struct {
		port int
		code protocol.Code
	}{
		{5432, protocol.CodeInvalidArgument},
		{0, protocol.CodeInvalidArgument},
		{70000, protocol.CodeInvalidArgument},
		{41235, protocol.CodeUnavailable}, // db, stopped
	} {
		if _, err := tc.s.dialPort(ctx, ws, c.port); protocol.CodeOf(err) != c.code {
			t.Errorf("dial port %d: %v; want %s", c.port, err, c.code)
		}
	}
	if n := tc.s.forwards.Open(ws.ID); n != 0 {
		t.Fatalf("%d connections counted after refused dials", n)
	}
}
