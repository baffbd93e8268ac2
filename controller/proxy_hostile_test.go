package controller

// Regression tests from the review of issue 19 (reaching services): each comment names the flaw
// its test guards against; each test failed before its fix.

import (
	"context"
	"encoding/json"
	"github.com/tetherhq/tether/controller/console"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/wsstate"
	"github.com/tetherhq/tether/protocol"
)

// serveDials plays the runner's side of tcp_dial: every dial is carried to addr (the "app").
func serveDials(t *testing.T, sess *yamux.Session, addr string) {
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func(st *yamux.Stream) {
				var h protocol.Header
				if err := protocol.ReadJSON(st, &h); err != nil {
					st.Close()
					return
				}
				if h.Op != protocol.OpTCPDial {
					_ = protocol.WriteJSON(st, protocol.Trailer{Error: protocol.AsError(protocol.Errorf(protocol.CodeInvalidArgument, "fake runner: %s", h.Op))})
					st.Close()
					return
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					_ = protocol.WriteJSON(st, protocol.Trailer{Error: protocol.AsError(err)})
					st.Close()
					return
				}
				_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(`{"addr":"x"}`)})
				go func() { _, _ = io.Copy(c, st); c.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(st, c)
				st.Close()
				c.Close()
			}(st)
		}
	}()
}

// reachFixture: a connected (fake) runner whose workspace has service "web" ready, served by h.
func reachFixture(t *testing.T, tc *testController, h http.Handler) (api.Workspace, int) {
	t.Helper()
	al, sess, _ := tc.connectRunner(t, "reach")
	ctx := context.Background()
	ws, err := tc.s.store.GetWorkspace(ctx, al.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if ws.State != api.StateReady {
		if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.FinishProvision, "", "test"); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	serveDials(t, sess, l.Addr().String())
	port := l.Addr().(*net.TCPAddr).Port
	if err := tc.s.store.PutService(ctx, api.Service{WorkspaceID: ws.ID, Name: "web", State: protocol.ServiceReady, Port: port, UpdatedAt: tc.s.now()}); err != nil {
		t.Fatal(err)
	}
	ws, _ = tc.s.store.GetWorkspace(ctx, ws.ID)
	return ws, port
}

func opGet(t *testing.T, tc *testController, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tc.url+path, nil)
	req.Header.Set("Authorization", protocol.Bearer(tc.s.OperatorToken()))
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// 1. Guards against: A proxy transport keeps the workspace as read by the request that made it: a request made
// while the workspace was closing poisons the transport, and once the close is refused (the
// workspace ready again, same allocation, same port) every new connection is still refused as
// "workspace is closing".
func TestProxyDialReadsTheWorkspaceAgain(t *testing.T) {
	tc := newTestController(t)
	ws, _ := reachFixture(t, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close") // no idle connection is kept: every request dials
		io.WriteString(w, "ok")
	}))
	path := "/v1/workspaces/" + ws.ID + "/services/web/proxy/"
	if resp, body := opGet(t, tc, path); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	tc.s.dropProxy(ws.ID, "web") // start from no transport
	ctx := context.Background()
	if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.StartClose, "", "test"); err != nil {
		t.Fatal(err)
	}
	resp, body := opGet(t, tc, path)
	t.Logf("while closing: %d %s", resp.StatusCode, body)
	if err := tc.s.store.TransitionWorkspace(ctx, ws.ID, wsstate.RefuseClose, "", "test"); err != nil {
		t.Fatal(err)
	}
	resp, body = opGet(t, tc, path)
	if resp.StatusCode != 200 {
		t.Fatalf("the workspace is ready again, yet the proxy answers %d %s", resp.StatusCode, body)
	}
}

// 2. Guards against: A hostile app's response header is read whole, up to net/http's 10 MiB default, for every
// proxied request (and 256 at once per workspace).
func TestProxyBoundsResponseHeaders(t *testing.T) {
	tc := newTestController(t)
	big := strings.Repeat("a", 8<<20)
	ws, _ := reachFixture(t, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", big)
		io.WriteString(w, "ok")
	}))
	resp, _ := opGet(t, tc, "/v1/workspaces/"+ws.ID+"/services/web/proxy/")
	if n := len(resp.Header.Get("X-Big")); n > 1<<20 {
		t.Fatalf("the controller read and passed on a %d-byte response header from the sandbox", n)
	}
}

// 3. Guards against: A preview link is revoked only by `service stop` through the API: a service that failed (or
// was stopped by a close) and is started again under the same name brings its old links back.
func TestPreviewDiesWithItsService(t *testing.T) {
	tc := newTestController(t)
	tc.s.advertise = tc.url
	ws, port := reachFixture(t, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "new program") }))
	status, body := tc.call(t, http.MethodPost, "/v1/workspaces/"+ws.ID+"/services/web/previews", tc.s.OperatorToken(), `{"ttl":"168h"}`)
	if status != http.StatusCreated {
		t.Fatal(status, body)
	}
	var p api.Preview
	_ = json.Unmarshal([]byte(body), &p)
	ctx := context.Background()
	// The runner reports the service failed; later a service of that name is ready again.
	tc.s.recordServices(ctx, ws.ID, []protocol.ServiceStatus{{Name: "web", State: protocol.ServiceFailed, Port: port}}, false)
	if err := tc.s.store.PutService(ctx, api.Service{WorkspaceID: ws.ID, Name: "web", State: protocol.ServiceReady, Port: port, UpdatedAt: tc.s.now()}); err != nil {
		t.Fatal(err)
	}
	resp, page := get(t, p.PathURL, "")
	if resp.StatusCode == 200 {
		t.Fatalf("a link made for the service before it stopped serves its successor: %q", page)
	}
}

// 4. Guards against: A redirect from the app to the controller's own API is passed on as it is (an absolute URL
// to the controller, or a path "under" the prefix that climbs out of it).
func TestRedirectNeverLeadsToTheAPI(t *testing.T) {
	prefix := "/v1/workspaces/ws_1/services/web/proxy"
	for _, loc := range []string{prefix + "/../../../../../v1/tokens", "http://controller.example:7070/v1/tokens"} {
		got := rewriteLocation(loc, "localhost:5173", prefix, "controller.example:7070")
		if !strings.HasPrefix(got, prefix+"/") || strings.Contains(got, "/../") {
			t.Errorf("Location %q is passed as %q: a client that follows it with its token reaches the API", loc, got)
		}
	}
}

// 5. Guards against: Proxied connections hold slots of the workspace's limit; after the controller drops the
// transports none may be left counted.
func TestProxySlotsGoBack(t *testing.T) {
	tc := newTestController(t)
	ws, _ := reachFixture(t, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	done := make(chan struct{})
	for range 20 {
		go func() {
			defer func() { done <- struct{}{} }()
			opGet(t, tc, "/v1/workspaces/"+ws.ID+"/services/web/proxy/")
		}()
	}
	for range 20 {
		<-done
	}
	t.Logf("open after 20 concurrent requests: %d (idle kept)", tc.s.forwards.Open(ws.ID))
	tc.s.closeIdleProxies()
	eventually(t, "slots back", func() bool { return tc.s.forwards.Open(ws.ID) == 0 })
	_ = strconv.Itoa
}

// 6. Guards against: A hostile runner answers each dialed connection with a whole response (Connection: close),
// then fills the stream's window and never sends its FIN. The controller closes its half and
// gives the slot back at once, but the stream — and what the runner pushed into its receive
// buffer — stays on the controller until yamux's 5-minute close timeout: the workspace's
// connection limit does not bound it.
func TestClosedStreamsKeepTheirSlots(t *testing.T) {
	tc := newTestController(t)
	al, sess, _ := tc.connectRunner(t, "hostile")
	ctx := context.Background()
	if ws, _ := tc.s.store.GetWorkspace(ctx, al.workspaceID); ws.State != api.StateReady {
		_ = tc.s.store.TransitionWorkspace(ctx, al.workspaceID, wsstate.FinishProvision, "", "test")
	}
	const port = 40999
	if err := tc.s.store.PutService(ctx, api.Service{WorkspaceID: al.workspaceID, Name: "web", State: protocol.ServiceReady, Port: port, UpdatedAt: tc.s.now()}); err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 200<<10)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); sess.Close() })
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func(st *yamux.Stream) {
				var h protocol.Header
				if protocol.ReadJSON(st, &h) != nil || h.Op != protocol.OpTCPDial {
					st.Close()
					return
				}
				_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: json.RawMessage(`{"addr":"x"}`)})
				buf := make([]byte, 4096)
				_, _ = st.Read(buf) // the request
				_, _ = io.WriteString(st, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
				_, _ = st.Write(junk) // into the controller's receive buffer; no FIN while the test runs
				<-stop
			}(st)
		}
	}()
	const n = 40
	for range n {
		if resp, body := opGet(t, tc, "/v1/workspaces/"+al.workspaceID+"/services/web/proxy/"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	rc, _ := tc.s.hub.Get(al.allocationID)
	t.Logf("slots counted: %d; streams open on the runner's connection: %d (each holding up to %d KiB)", tc.s.forwards.Open(al.workspaceID), rc.Streams(), len(junk)>>10)
	if open, streams := tc.s.forwards.Open(al.workspaceID), rc.Streams(); streams > open+2 {
		t.Fatalf("%d streams linger with %d slots counted", streams, open)
	}
}

// 7. Guards against: On the preview host the app is at / and no X-Forwarded-Prefix is set — so the client's own
// X-Forwarded-Prefix reaches the app, which trusts it as its proxy's (links, redirects).
func TestPreviewHostSetsItsOwnPrefix(t *testing.T) {
	tc := newTestController(t)
	tc.s.advertise = tc.url
	tc.s.cfg.PreviewDomain = "preview.test"
	seen := make(chan string, 1)
	ws, _ := reachFixture(t, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Forwarded-Prefix") + " | auth=" + r.Header.Get("Authorization") + " | cookie=" + r.Header.Get("Cookie")
	}))
	_, body := tc.call(t, http.MethodPost, "/v1/workspaces/"+ws.ID+"/services/web/previews", tc.s.OperatorToken(), `{}`)
	var p api.Preview
	_ = json.Unmarshal([]byte(body), &p)
	token := strings.TrimSuffix(strings.TrimPrefix(p.PathURL, tc.url+"/p/"), "/")
	ph := httptestServer(tc.s.previewHost())
	defer ph.Close()
	cookie := enterPreviewHost(t, ph.URL, previewLabel(p.ID), token)
	// Another link's host does not take this link's secret.
	if resp, _ := get(t, ph.URL+previewEnterPath+"?t="+token, "pv-0000000000000000.preview.test"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a link's secret on another link's host: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, ph.URL+"/", nil)
	req.Host = previewLabel(p.ID) + ".preview.test"
	req.AddCookie(cookie)
	req.AddCookie(&http.Cookie{Name: "app_session", Value: "kept"})
	req.Header.Set("X-Forwarded-Prefix", "//evil.example")
	req.Header.Set("Authorization", protocol.Bearer(tc.s.OperatorToken()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := <-seen
	if strings.Contains(got, "evil") || strings.Contains(got, "tot_") || strings.Contains(got, token) || !strings.Contains(got, "app_session=kept") {
		t.Fatalf("the app saw %q (no client prefix, no Tether token, no link secret; its own cookie kept)", got)
	}
}

func httptestServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }

// Guards against: a cookie an app sets for / on the controller's origin being sent to every
// other preview's app; each cookie is kept under the prefix it came through.
func TestProxyScopesCookiesToThePrefix(t *testing.T) {
	prefix := "/p/abcdefghijklmnopqrstuvwxyz234567"
	h := http.Header{}
	h.Add("Set-Cookie", "session=1; Path=/; HttpOnly")
	h.Add("Set-Cookie", "pref=dark")
	h.Add("Set-Cookie", "deep=1; Path="+prefix+"/app")
	h.Add("Set-Cookie", "climb=1; Path="+prefix+"/../../v1")
	scopeCookies(h, prefix)
	want := map[string]string{"session": prefix, "pref": prefix, "deep": prefix + "/app", "climb": prefix + "/v1"}
	got := (&http.Response{Header: h}).Cookies()
	if len(got) != len(want) {
		t.Fatalf("cookies %v; want %d", got, len(want))
	}
	for _, c := range got {
		if want[c.Name] != c.Path {
			t.Errorf("cookie %s has path %q; want %q", c.Name, c.Path, want[c.Name])
		}
	}
	if c := got[0]; c.Name != "session" || !c.HttpOnly {
		t.Errorf("attributes lost: %+v", c)
	}
}

// Guards against: an app on the controller's origin joining the console's browsing context group
// (its Cross-Origin-Opener-Policy equal to the console's, so a console window it opens is its to
// script) or being handed the console's session cookie; and the app's own cookies, even ones
// net/http would call invalid, dropped on the way.
func TestProxyKeepsTheConsoleAway(t *testing.T) {
	tc := newTestController(t)
	ws, _ := reachFixture(t, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cross-Origin-Opener-Policy", "same-origin")
		w.Header().Set("Clear-Site-Data", `"*"`)
		io.WriteString(w, r.Header.Get("Cookie"))
	}))
	req, _ := http.NewRequest(http.MethodGet, tc.url+"/v1/workspaces/"+ws.ID+"/services/web/proxy/", nil)
	req.Header.Set("Authorization", protocol.Bearer(tc.s.OperatorToken()))
	req.Header.Set("Cookie", `app={"a":"b"}; `+console.CookieName+`=tcs_secret; theme=dark`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxy answered %d: %s", resp.StatusCode, body)
	}
	for _, h := range []string{"Cross-Origin-Opener-Policy", "Clear-Site-Data"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("the app's %s: %s reached the browser", h, v)
		}
	}
	if got, want := string(body), `app={"a":"b"}; theme=dark`; got != want {
		t.Errorf("the app was sent Cookie %q; want %q", got, want)
	}
}
