package controller

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

type testController struct {
	s   *Server
	url string // http://host:port
}

// newTestController serves a controller on a temp data dir, without provider plugins.
func newTestController(t *testing.T, opts ...func(*Config)) *testController {
	t.Helper()
	cfg := Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var handlers sync.WaitGroup
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		// Client connections were closed by cleanups registered later; runner handlers end with
		// the server context.
		s.stopRoutines()
		handlers.Wait()
		ts.Close()
		s.providers.Close()
		if err := s.store.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	return &testController{s: s, url: ts.URL}
}

// withClock puts the controller, and its store, on clock.
func withClock(clock clockwork.Clock) func(*Config) {
	return func(c *Config) { c.Clock = clock }
}

type allocation struct {
	workspaceID, allocationID, token string
}

// addAllocation records a workspace whose allocation waits for its runner with a fresh bootstrap
// token, the way handleCreateWorkspace does before asking a provider.
func (tc *testController) addAllocation(t *testing.T, name string) allocation {
	t.Helper()
	token := newToken(prefixBootstrap)
	now := time.Now().UTC()
	w := api.Workspace{ID: newID("ws_"), Name: name, Provider: "local", State: api.StateProvisioning,
		AllocationID: newID("al_"), CreatedAt: now, UpdatedAt: now}
	a := store.Allocation{ID: w.AllocationID, WorkspaceID: w.ID, Provider: "local", State: store.AllocStarting,
		BootstrapHash: hashToken(token), CreatedAt: now, UpdatedAt: now}
	if err := tc.s.store.CreateWorkspace(context.Background(), w, a); err != nil {
		t.Fatal(err)
	}
	return allocation{workspaceID: w.ID, allocationID: a.ID, token: token}
}

// dial opens a runner websocket with token. On refusal it returns the HTTP response.
func (tc *testController) dial(t *testing.T, token string) (*yamux.Session, *http.Response) {
	t.Helper()
	return tc.dialWrapped(t, token, nil)
}

// dialWrapped is dial with the runner's end of the connection passed through wrap, if set.
func (tc *testController) dialWrapped(t *testing.T, token string, wrap func(net.Conn) net.Conn) (*yamux.Session, *http.Response) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", protocol.Bearer(token))
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(tc.url, "http")+protocol.ConnectPath, h)
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return nil, resp
	}
	var conn net.Conn = protocol.NewWSConn(ws)
	if wrap != nil {
		conn = wrap(conn)
	}
	sess, err := protocol.MuxClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sess.Close()
		conn.Close()
	})
	return sess, resp
}

// mustDial dials and fails unless the websocket was accepted.
func (tc *testController) mustDial(t *testing.T, token string) *yamux.Session {
	t.Helper()
	sess, resp := tc.dial(t, token)
	if sess == nil {
		t.Fatalf("runner connection refused: %s", resp.Status)
	}
	return sess
}

func goodHello(allocationID string) protocol.Hello {
	return protocol.Hello{ProtocolMin: protocol.ProtocolMin, ProtocolMax: protocol.ProtocolMax, RunnerVersion: "runner-test",
		AllocationID: allocationID, Capabilities: protocol.RunnerCapabilities(), PID: 42, Root: "/srv/ws"}
}

// hello sends the hello on a new stream and returns the controller's trailer; a welcome is
// acknowledged as the runner does.
func hello(t *testing.T, sess *yamux.Session, h protocol.Hello) protocol.Trailer {
	t.Helper()
	return helloAck(t, sess, h, true)
}

// helloAck is hello with the welcome acknowledged or not (a runner whose ack was lost).
func helloAck(t *testing.T, sess *yamux.Session, h protocol.Hello, ack bool) protocol.Trailer {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(15 * time.Second))
	// A controller that refuses the hello answers and closes the session at once; yamux may then
	// report the shutdown to a Write whose bytes did arrive (its send and the shutdown race), so
	// a failed write is only a failure if no answer can be read either.
	werr := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpHello})
	if werr == nil {
		werr = protocol.WriteJSON(st, h)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		t.Fatalf("reading the hello trailer: %v (writing the hello: %v)", err, werr)
	}
	var w protocol.Welcome
	if ack && tr.OK && json.Unmarshal(tr.Result, &w) == nil && w.SessionToken != "" {
		if err := protocol.WriteJSON(st, protocol.WelcomeAck{SessionTokenSHA256: hashToken(w.SessionToken)}); err != nil {
			t.Fatalf("acknowledging the welcome: %v", err)
		}
	}
	return tr
}

func welcome(t *testing.T, tr protocol.Trailer) protocol.Welcome {
	t.Helper()
	if err := tr.Err(); err != nil {
		t.Fatalf("hello refused: %v", err)
	}
	var w protocol.Welcome
	if err := json.Unmarshal(tr.Result, &w); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	return w
}

func waitClosed(t *testing.T, what string, sess *yamux.Session) {
	t.Helper()
	select {
	case <-sess.CloseChan():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still open", what)
	}
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (tc *testController) allocState(t *testing.T, id string) store.Allocation {
	t.Helper()
	a, err := tc.s.store.GetAllocation(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// wantRefused checks a refused HTTP response: its status and its typed JSON error.
func wantRefused(t *testing.T, what string, resp *http.Response, status int, code protocol.Code) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("%s: status %s; want %d", what, resp.Status, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
	var body api.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: body: %v", what, err)
	}
	if body.Error.Code != code || body.Error.Message == "" {
		t.Fatalf("%s: error %+v; want code %s with a message", what, body.Error, code)
	}
}

func TestRunnerHelloForAnotherAllocation(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	b := tc.addAllocation(t, "b")

	sess := tc.mustDial(t, a.token)
	tr := hello(t, sess, goodHello(b.allocationID))
	if tr.OK || tr.Error == nil || tr.Error.Code != protocol.CodeUnauthorized {
		t.Fatalf("hello naming another allocation: %+v; want an unauthorized error", tr)
	}
	if len(tr.Result) != 0 {
		t.Fatalf("refused hello carried a result (a session token?): %s", tr.Result)
	}
	waitClosed(t, "refused runner's session", sess)
	for _, id := range []string{a.allocationID, b.allocationID} {
		if _, ok := tc.s.hub.Get(id); ok {
			t.Fatalf("allocation %s registered after a refused hello", id)
		}
		if st := tc.allocState(t, id).State; st != store.AllocStarting {
			t.Fatalf("allocation %s is %s after a refused hello; want %s", id, st, store.AllocStarting)
		}
	}
	// B's own token still works for B.
	w := welcome(t, hello(t, tc.mustDial(t, b.token), goodHello(b.allocationID)))
	if w.WorkspaceID != b.workspaceID {
		t.Fatalf("welcome for workspace %s; want %s", w.WorkspaceID, b.workspaceID)
	}
	eventually(t, "b registered", func() bool { _, ok := tc.s.hub.Get(b.allocationID); return ok })
	if _, ok := tc.s.hub.Get(a.allocationID); ok {
		t.Fatal("a registered by b's connection")
	}
	// A's token was not spent by the refused hello: A's real runner can still connect.
	w = welcome(t, hello(t, tc.mustDial(t, a.token), goodHello(a.allocationID)))
	if w.WorkspaceID != a.workspaceID || w.SessionToken == "" {
		t.Fatalf("a's runner after a refused hello: %+v", w)
	}
}

func TestRunnerHelloUnsupportedProtocol(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	h := goodHello(a.allocationID)
	h.ProtocolMin, h.ProtocolMax = 99, 100
	sess := tc.mustDial(t, a.token)
	tr := hello(t, sess, h)
	if tr.OK || tr.Error == nil || tr.Error.Code != protocol.CodeUnsupported {
		t.Fatalf("hello with protocol 99..100: %+v; want unsupported", tr)
	}
	waitClosed(t, "refused runner's session", sess)
	if _, ok := tc.s.hub.Get(a.allocationID); ok {
		t.Fatal("runner with no common protocol registered")
	}
}

func TestRunnerFirstOpMustBeHello(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	sess := tc.mustDial(t, a.token)
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.WriteJSON(st, protocol.Header{Op: protocol.OpRunExited}); err != nil {
		t.Fatal(err)
	}
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil {
		t.Fatal(err)
	}
	if tr.OK || protocol.CodeOf(tr.Err()) != protocol.CodeInvalidArgument {
		t.Fatalf("first op %q answered %+v; want invalid_argument", protocol.OpRunExited, tr)
	}
	waitClosed(t, "session", sess)
	if _, ok := tc.s.hub.Get(a.allocationID); ok {
		t.Fatal("registered without a hello")
	}
}

func TestRunnerBootstrapThenSession(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	other := tc.addAllocation(t, "other")

	first := tc.mustDial(t, a.token)
	w := welcome(t, hello(t, first, goodHello(a.allocationID)))
	if w.Protocol != protocol.ProtocolMax || w.WorkspaceID != a.workspaceID {
		t.Fatalf("welcome = %+v", w)
	}
	if !strings.HasPrefix(w.SessionToken, prefixSession) || len(w.SessionToken) < len(prefixSession)+32 {
		t.Fatalf("session token %q; want a %s token", w.SessionToken, prefixSession)
	}
	eventually(t, "runner registered", func() bool { _, ok := tc.s.hub.Get(a.allocationID); return ok })
	rec := tc.allocState(t, a.allocationID)
	if rec.State != store.AllocConnected || rec.Root != "/srv/ws" || rec.RunnerVersion != "runner-test" {
		t.Fatalf("allocation record after hello: %+v", rec)
	}
	if !rec.BootstrapUsed || rec.SessionHash != hashToken(w.SessionToken) || strings.Contains(rec.SessionHash, w.SessionToken) {
		t.Fatalf("store must keep only the session token's hash: %+v", rec)
	}

	// The bootstrap token was for one use: refused before the upgrade.
	_, resp := tc.dial(t, a.token)
	if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		t.Fatal("spent bootstrap token accepted")
	}
	wantRefused(t, "spent bootstrap token", resp, http.StatusUnauthorized, protocol.CodeUnauthorized)

	// While the runner is connected, its own token does not open a second connection.
	_, resp = tc.dial(t, w.SessionToken)
	if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		t.Fatal("a second connection was accepted while the runner is connected")
	}
	wantRefused(t, "second connection", resp, protocol.StatusAllocationBusy, protocol.CodeUnauthorized)
	first.Close()
	eventually(t, "the first connection gone", func() bool { _, ok := tc.s.hub.Get(a.allocationID); return !ok })

	// The session token names the allocation; a hello for another one is refused.
	sess := tc.mustDial(t, w.SessionToken)
	if tr := hello(t, sess, goodHello(other.allocationID)); protocol.CodeOf(tr.Err()) != protocol.CodeUnauthorized {
		t.Fatalf("session token with another allocation's hello: %+v", tr)
	}
	waitClosed(t, "refused session", sess)
	if _, ok := tc.s.hub.Get(other.allocationID); ok {
		t.Fatal("other allocation registered through a's session token")
	}

	// Reconnecting with the session token is accepted, and the welcome carries a new token.
	second := tc.mustDial(t, w.SessionToken)
	h := goodHello(a.allocationID)
	h.PID = 43
	w2 := welcome(t, hello(t, second, h))
	if w2.WorkspaceID != a.workspaceID || !strings.HasPrefix(w2.SessionToken, prefixSession) || w2.SessionToken == w.SessionToken {
		t.Fatalf("welcome on reconnect = %+v", w2)
	}
	eventually(t, "reconnected runner registered", func() bool {
		c, ok := tc.s.hub.Get(a.allocationID)
		return ok && c.Hello.PID == 43
	})
	if second.IsClosed() {
		t.Fatal("new connection closed")
	}
	if rec := tc.allocState(t, a.allocationID); rec.SessionHash != hashToken(w2.SessionToken) || rec.PendingSessionHash != "" {
		t.Fatalf("store after the reconnect: %+v", rec)
	}
	second.Close()
	eventually(t, "the second connection gone", func() bool { _, ok := tc.s.hub.Get(a.allocationID); return !ok })

	// A destroyed allocation's session is revoked.
	if err := tc.s.store.UpdateAllocation(context.Background(), a.allocationID, store.AllocDestroyed, "", ""); err != nil {
		t.Fatal(err)
	}
	_, resp = tc.dial(t, w2.SessionToken)
	if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		t.Fatal("session of a destroyed allocation accepted")
	}
	wantRefused(t, "session of a destroyed allocation", resp, http.StatusForbidden, protocol.CodeRevoked)
}

func TestRunnerConnectRefusesBadTokens(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	for name, token := range map[string]string{
		"none":              "",
		"operator token":    tc.s.OperatorToken(),
		"unknown bootstrap": newToken(prefixBootstrap),
		"unknown session":   newToken(prefixSession),
		"bootstrap hash":    hashToken(a.token),
		"unprefixed":        strings.TrimPrefix(a.token, prefixBootstrap),
		"session prefix":    prefixSession + strings.TrimPrefix(a.token, prefixBootstrap),
		"empty session":     prefixSession,
	} {
		sess, resp := tc.dial(t, token)
		if sess != nil {
			t.Fatalf("%s: runner connection accepted", name)
		}
		wantRefused(t, name, resp, http.StatusUnauthorized, protocol.CodeUnauthorized)
	}
	// None of that spent or touched the real token.
	if rec := tc.allocState(t, a.allocationID); rec.BootstrapUsed || rec.SessionHash != "" || rec.PendingSessionHash != "" {
		t.Fatalf("refused attempts changed the allocation: %+v", rec)
	}
	welcome(t, hello(t, tc.mustDial(t, a.token), goodHello(a.allocationID)))
}

func TestOperatorAPIAuth(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	call := func(method, path, auth string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, tc.url+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	op := tc.s.OperatorToken()
	if !strings.HasPrefix(op, prefixOperator) {
		t.Fatalf("operator token %q", op)
	}
	routes := []struct{ method, path string }{
		{"GET", "/v1/workspaces"},
		{"POST", "/v1/workspaces"},
		{"GET", "/v1/workspaces/" + a.workspaceID},
		{"DELETE", "/v1/workspaces/" + a.workspaceID},
		{"PUT", "/v1/workspaces/" + a.workspaceID + "/tree"},
		{"GET", "/v1/workspaces/" + a.workspaceID + "/exec"},
		{"GET", "/v1/workspaces/" + a.workspaceID + "/runs"},
		{"GET", "/v1/nothing-here"},
	}
	bad := map[string]string{
		"none":         "",
		"wrong":        protocol.Bearer(newToken(prefixOperator)),
		"prefix":       protocol.Bearer(op[:len(op)-1]),
		"longer":       protocol.Bearer(op + "0"),
		"not bearer":   "Basic " + op,
		"bare token":   op,
		"runner token": protocol.Bearer(a.token),
		"empty bearer": "Bearer ",
		"uppercased":   protocol.Bearer(strings.ToUpper(op)),
	}
	for _, r := range routes {
		for name, auth := range bad {
			wantRefused(t, r.method+" "+r.path+" with "+name+" token", call(r.method, r.path, auth), http.StatusUnauthorized, protocol.CodeUnauthorized)
		}
	}
	// Nothing was done by the refused calls.
	if ws, err := tc.s.store.ListWorkspaces(context.Background(), true); err != nil || len(ws) != 1 || ws[0].State != api.StateProvisioning {
		t.Fatalf("refused calls changed workspaces: %+v, %v", ws, err)
	}

	resp := call("GET", "/v1/workspaces", protocol.Bearer(op))
	defer resp.Body.Close()
	var list []api.Workspace
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil || len(list) != 1 || list[0].ID != a.workspaceID {
		t.Fatalf("GET /v1/workspaces with the operator token: %s, %+v", resp.Status, list)
	}

	health := call("GET", "/healthz", "")
	defer health.Body.Close()
	var hb map[string]string
	if health.StatusCode != http.StatusOK || json.NewDecoder(health.Body).Decode(&hb) != nil || hb["status"] != "ok" {
		t.Fatalf("GET /healthz without a token: %s %v", health.Status, hb)
	}
}
