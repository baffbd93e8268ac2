package controller

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/forward"
	"github.com/tetherhq/tether/plugins/providertest"
	"github.com/tetherhq/tether/protocol"
)

// idleDriver runs the controller's idle loop on a fake clock, one pass at a time.
type idleDriver struct {
	fc     *clockwork.FakeClock
	passes chan struct{}
}

func startIdle(t *testing.T, tc *testController, fc *clockwork.FakeClock) *idleDriver {
	t.Helper()
	d := &idleDriver{fc: fc, passes: make(chan struct{})}
	tc.s.idlePassed = func() { d.passes <- struct{}{} }
	if !tc.s.routines.Go("idle sweep", tc.s.idleLoop) {
		t.Fatal("idle loop not started")
	}
	<-d.passes // armed
	return d
}

// advance moves the clock by by (at least one tick) and waits for the pass it triggers, and
// whatever that pass stopped or closed.
func (d *idleDriver) advance(by time.Duration) {
	d.fc.Advance(by)
	<-d.passes
}

// localProvider is a plugin directory holding the local provider, built from this tree: a close
// destroys the sandbox through it (the test's runners run in this process, so the provider finds
// nothing to destroy, which is a success).
func localProvider(t *testing.T) func(*Config) {
	t.Helper()
	bin := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-provider-local", "tether-provider-local", "")
	return func(c *Config) { c.PluginDir = filepath.Dir(bin) }
}

func idleClose(after time.Duration) func(*Config) {
	return func(c *Config) { c.Idle = &api.IdlePolicy{Action: api.IdleClose, After: protocol.Duration(after)} }
}

func (tc *testController) state(t *testing.T, id string) api.WorkspaceState {
	t.Helper()
	ws, err := tc.s.store.GetWorkspace(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ws.State
}

// A file operation resets the idle timer; reading the workspace, listing its runs, services
// and events do not. Idle for the controller's default, the workspace is closed (its change
// saved) with an event saying why.
func TestIdleCloseAfterFileActivity(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const after = 10 * time.Minute
	tc := newTestController(t, withClock(fc), localProvider(t), idleClose(after))
	ws := tc.liveWorkspace(t, "idle")
	op := tc.s.OperatorToken()
	d := startIdle(t, tc, fc)

	d.advance(after / 2)
	if code, body := tc.call(t, http.MethodPut, "/v1/workspaces/"+ws.workspaceID+"/files/notes.txt", op, "work"); code != http.StatusCreated {
		t.Fatalf("write a file: %d %s", code, body)
	}
	d.advance(after/2 + time.Minute) // idle since it was ready, but not since the write
	if got := tc.state(t, ws.workspaceID); got != api.StateReady {
		t.Fatalf("a minute past the idle time since ready, %s after a write: %s", after/2, got)
	}
	got, err := tc.s.workspace(context.Background(), ws.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Idle == nil || got.Idle.Action != api.IdleClose || time.Duration(got.Idle.After) != after || got.IdlePolicy != nil ||
		got.LastActivityAt == nil || got.LastActivityAt.Before(fc.Now().Add(-after/2-time.Minute-time.Second)) {
		t.Fatalf("workspace: idle %+v own %+v last activity %v", got.Idle, got.IdlePolicy, got.LastActivityAt)
	}

	// Looking is not activity.
	for _, p := range []string{"", "/runs", "/services", "/events", "/snapshots"} {
		if code, body := tc.call(t, http.MethodGet, "/v1/workspaces/"+ws.workspaceID+p, op, ""); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, code, body)
		}
	}
	if code, _ := tc.call(t, http.MethodGet, "/v1/workspaces", op, ""); code != http.StatusOK {
		t.Fatal("list workspaces")
	}
	d.advance(after/2 - time.Minute + idleTick)
	if got := tc.state(t, ws.workspaceID); got != api.StateClosed {
		t.Fatalf("idle for %s after the write, looked at since: %s; want closed", after, got)
	}
	if n := events(t, tc, ws.workspaceID, "idle close: no activity for 10m0s"); n != 1 {
		t.Fatalf("idle close events: %d; want 1", n)
	}
	if list := receipts(t, tc, ws.workspaceID); len(list) != 1 {
		t.Fatalf("the close saved %d receipts; want 1", len(list))
	}
}

// A run is activity all the time it runs, and the idle time counts from its end; an open
// service connection (port-forward) is activity while it is open.
func TestIdleRunsAndConnections(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const after = 10 * time.Minute
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	ports, err := forward.ParsePorts(strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	tc := newTestController(t, withClock(fc), localProvider(t), idleClose(after), func(c *Config) { c.ForwardPorts = ports })
	ws := tc.liveWorkspace(t, "busy")
	cl := tc.apiClient(t, tc.s.OperatorToken())
	ctx := context.Background()
	d := startIdle(t, tc, fc)

	// A detached run that runs until it is signalled.
	res, err := cl.ExecRun(ctx, ws.workspaceID, protocol.ExecArgs{Argv: []string{"sleep", "1000"}, Detach: true}, client.ExecIO{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil || res.RunID == "" {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	d.advance(2 * after)
	if got := tc.state(t, ws.workspaceID); got != api.StateReady {
		t.Fatalf("twice the idle time into a run: %s", got)
	}
	if _, err := cl.SignalRun(ctx, res.RunID, "KILL"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the run ends", func() bool {
		r, err := tc.s.store.GetRun(ctx, res.RunID)
		return err == nil && r.State != api.RunRunning
	})

	// An open connection, held past the idle time.
	conn, err := cl.DialPort(ctx, ws.workspaceID, port)
	if err != nil {
		t.Fatal(err)
	}
	d.advance(after / 2)
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	// Read back, so the close below is a FIN, not a reset of unread bytes.
	if _, err := io.ReadFull(conn, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	d.advance(after)
	if got := tc.state(t, ws.workspaceID); got != api.StateReady {
		t.Fatalf("%s into an open connection, %s after the run: %s", after, after+after/2, got)
	}
	conn.Close()
	eventually(t, "the connection's end is counted", func() bool {
		_, open := tc.s.activity.latest(ws.workspaceID, fc.Now())
		return !open
	})
	d.advance(after - time.Minute)
	if got := tc.state(t, ws.workspaceID); got != api.StateReady {
		t.Fatalf("%s after the connection closed: %s", after-time.Minute, got)
	}
	d.advance(time.Minute + idleTick)
	if got := tc.state(t, ws.workspaceID); got != api.StateClosed {
		t.Fatalf("idle for %s after the connection: %s; want closed", after, got)
	}
}

// A close the idle policy cannot make (the runner is away: nothing can be saved) is an event,
// the workspace stays ready, and the next try comes an idle time later, not at every pass.
func TestIdleCloseRefusedIsRetriedLater(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const after = 10 * time.Minute
	tc := newTestController(t, withClock(fc), idleClose(after))
	ws := tc.liveWorkspace(t, "away")
	ws.stop()
	eventually(t, "the runner is gone", func() bool { _, ok := tc.s.hub.Get(ws.allocationID); return !ok })
	d := startIdle(t, tc, fc)

	d.advance(after + idleTick)
	if n := events(t, tc, ws.workspaceID, "idle close refused"); n != 1 || tc.state(t, ws.workspaceID) != api.StateReady {
		t.Fatalf("refused idle close: %d events, state %s; want 1 event, ready", n, tc.state(t, ws.workspaceID))
	}
	for range 3 {
		d.advance(idleTick)
	}
	if n := events(t, tc, ws.workspaceID, "idle close refused"); n != 1 {
		t.Fatalf("%d refusals within the idle time after the first; want 1", n)
	}
	d.advance(after)
	if n := events(t, tc, ws.workspaceID, "idle close refused"); n != 2 {
		t.Fatalf("%d refusals an idle time later; want 2", n)
	}
}

// The policy of a workspace: set at creation or by PATCH (stop or close, at least a minute, one
// at a time), off whatever the default, back to the default; bad input changes nothing.
func TestIdlePolicySettings(t *testing.T) {
	tc := newTestController(t, idleClose(time.Hour))
	ws := tc.liveWorkspace(t, "settings")
	op := tc.s.OperatorToken()
	patch := func(body string) (int, api.Workspace) {
		t.Helper()
		code, out := tc.call(t, http.MethodPatch, "/v1/workspaces/"+ws.workspaceID, op, body)
		var w api.Workspace
		if code == http.StatusOK {
			w, _ = tc.s.workspace(context.Background(), ws.workspaceID)
		} else if !strings.Contains(out, string(protocol.CodeInvalidArgument)) {
			t.Fatalf("PATCH %s: %d %s; want invalid_argument", body, code, out)
		}
		return code, w
	}
	if code, w := patch(`{"idle_stop":"30m"}`); code != http.StatusOK || w.Idle == nil || w.Idle.Action != api.IdleStop || time.Duration(w.Idle.After) != 30*time.Minute {
		t.Fatalf("idle_stop 30m: %d %+v", code, w.Idle)
	}
	for _, bad := range []string{`{"idle_stop":"30m","idle_close":"1h"}`, `{"idle_close":"30s"}`, `{"idle_off":true,"idle_default":true}`} {
		if code, _ := patch(bad); code == http.StatusOK {
			t.Fatalf("%s accepted", bad)
		}
	}
	if w, _ := tc.s.workspace(context.Background(), ws.workspaceID); w.IdlePolicy == nil || w.IdlePolicy.Action != api.IdleStop {
		t.Fatalf("refused changes changed the policy: %+v", w.IdlePolicy)
	}
	if code, w := patch(`{"idle_off":true}`); code != http.StatusOK || w.Idle != nil || w.IdlePolicy == nil || w.IdlePolicy.Action != api.IdleOff {
		t.Fatalf("idle_off: %d in force %+v own %+v", code, w.Idle, w.IdlePolicy)
	}
	if code, w := patch(`{"idle_default":true}`); code != http.StatusOK || w.IdlePolicy != nil || w.Idle == nil || w.Idle.Action != api.IdleClose {
		t.Fatalf("idle_default: %d in force %+v own %+v", code, w.Idle, w.IdlePolicy)
	}
	if _, err := tc.s.CreateWorkspace(context.Background(), api.CreateWorkspaceRequest{Name: "both", IdleStop: durPtr(time.Hour), IdleClose: durPtr(time.Hour)}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("create with idle_stop and idle_close: %v", err)
	}
}

// A call that uses a closed workspace is refused with how to reopen it (a read is answered from
// the saved copy, as before); a wake header that is not a boolean is invalid.
func TestUseOfClosedWorkspace(t *testing.T) {
	tc := newTestController(t)
	ws, _ := tc.storedWorkspace(t, "shut", time.Now().UTC(), 1, nil)
	op := tc.s.OperatorToken()
	code, body := tc.call(t, http.MethodPut, "/v1/workspaces/"+ws.ID+"/files/x.txt", op, "x")
	if code != http.StatusConflict || !strings.Contains(body, "tether workspace reopen "+ws.ID) || !strings.Contains(body, "--wake") {
		t.Fatalf("write to a closed workspace: %d %s", code, body)
	}
	cl := tc.apiClient(t, op)
	var buf bytes.Buffer
	if res, err := cl.ReadFile(context.Background(), ws.ID, "work.txt", &buf, client.ReadOptions{}); err != nil || res.Source != protocol.SourceSaved {
		t.Fatalf("read of a closed workspace: %+v, %v", res, err)
	}
	req, _ := http.NewRequest(http.MethodPut, tc.url+"/v1/workspaces/"+ws.ID+"/files/x.txt", strings.NewReader("x"))
	req.Header.Set("Authorization", protocol.Bearer(op))
	req.Header.Set(HeaderWake, "perhaps")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), string(protocol.CodeInvalidArgument)) {
		t.Fatalf("wake header %q: %d %s", "perhaps", resp.StatusCode, b)
	}
	if got := tc.state(t, ws.ID); got != api.StateClosed {
		t.Fatalf("refused calls changed the workspace: %s", got)
	}
}

// Idle for its own policy, a workspace is stopped (its sandbox kept); a call with the wake
// header starts it again and is done. The workspace is a real one of the local provider (its
// runner a process the plugin started), so the stop and the start are the provider's.
func TestIdleStopThenWake(t *testing.T) {
	fc := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	const after = 10 * time.Minute
	runnerBin := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-runner", "tether-runner", "")
	tc := newTestController(t, withClock(fc), localProvider(t), func(c *Config) { c.RunnerBinary = runnerBin })
	tc.s.advertise = tc.url
	created, err := tc.s.CreateWorkspace(context.Background(), api.CreateWorkspaceRequest{Name: "nap", Provider: "local",
		IdleStop: durPtr(after)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.s.DeleteWorkspace(context.Background(), created.ID) })
	ws := struct{ workspaceID string }{created.ID}
	d := startIdle(t, tc, fc)
	d.advance(after + idleTick)
	if got := tc.state(t, ws.workspaceID); got != api.StateStopped {
		t.Fatalf("idle for %s with idle stop: %s; want stopped", after, got)
	}
	op := tc.s.OperatorToken()
	code, body := tc.call(t, http.MethodPut, "/v1/workspaces/"+ws.workspaceID+"/files/back.txt", op, "back")
	if code != http.StatusConflict || !strings.Contains(body, "tether workspace start "+ws.workspaceID) {
		t.Fatalf("write to a stopped workspace: %d %s", code, body)
	}
	cl := tc.apiClient(t, op).WithWake()
	if _, err := cl.WriteFile(context.Background(), ws.workspaceID, "back.txt", strings.NewReader("back"), client.WriteOptions{}); err != nil {
		t.Fatalf("write with wake: %v", err)
	}
	if got := tc.state(t, ws.workspaceID); got != api.StateReady {
		t.Fatalf("after a woken write: %s", got)
	}
}
