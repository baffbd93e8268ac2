package controller

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
)

// connectOnce dials with token, says hello (acknowledged or not) and returns the session and
// the welcome, once the controller registered the connection.
func (tc *testController) connectOnce(t *testing.T, al allocation, token string, ack bool) (*yamux.Session, protocol.Welcome) {
	t.Helper()
	sess := tc.mustDial(t, token)
	w := welcome(t, helloAck(t, sess, goodHello(al.allocationID), ack))
	eventually(t, "runner registered", func() bool {
		c, ok := tc.s.hub.Get(al.allocationID)
		return ok && !c.ConnectedAt.IsZero()
	})
	return sess, w
}

// closeConn ends a runner connection and waits until the controller let go of it.
func (tc *testController) closeConn(t *testing.T, al allocation, sess *yamux.Session) {
	t.Helper()
	sess.Close()
	eventually(t, "the connection gone", func() bool { _, ok := tc.s.hub.Get(al.allocationID); return !ok })
}

func wantTokenRefused(t *testing.T, tc *testController, what, token string) {
	t.Helper()
	sess, resp := tc.dial(t, token)
	if sess != nil {
		t.Fatalf("%s: connection accepted", what)
	}
	wantRefused(t, what, resp, http.StatusUnauthorized, protocol.CodeUnauthorized)
}

// Every accepted hello rotates the session token; the one the runner reconnected with is refused
// from then on, and so is every earlier one.
func TestRunnerSessionTokenRotates(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	sess, w1 := tc.connectOnce(t, a, a.token, true)
	tc.closeConn(t, a, sess)
	sess, w2 := tc.connectOnce(t, a, w1.SessionToken, true)
	if w2.SessionToken == w1.SessionToken || !strings.HasPrefix(w2.SessionToken, prefixSession) {
		t.Fatalf("the reconnect's welcome carries %q after %q; want a new session token", w2.SessionToken, w1.SessionToken)
	}
	tc.closeConn(t, a, sess)
	wantTokenRefused(t, tc, "the previous session token", w1.SessionToken)
	wantTokenRefused(t, tc, "the bootstrap token", a.token)
	sess, w3 := tc.connectOnce(t, a, w2.SessionToken, true)
	tc.closeConn(t, a, sess)
	for name, token := range map[string]string{"first": w1.SessionToken, "second": w2.SessionToken, "bootstrap": a.token} {
		wantTokenRefused(t, tc, name+" token after two rotations", token)
	}
	rec := tc.allocState(t, a.allocationID)
	if rec.SessionHash != hashToken(w3.SessionToken) || rec.PendingSessionHash != "" || strings.Contains(rec.SessionHash, w3.SessionToken) {
		t.Fatalf("store after three connects: %+v; want only the hash of the last token", rec)
	}
	tc.connectOnce(t, a, w3.SessionToken, true)
}

// A welcome that never reached the runner (its ack missing) does not lock the runner out: the
// token it connected with still works until it shows it holds a newer one — by acknowledging a
// welcome or by presenting the new token — and then every older one is refused.
func TestRunnerLostWelcome(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")

	// The first welcome is lost: the bootstrap token still admits the runner.
	sess, lost1 := tc.connectOnce(t, a, a.token, false)
	tc.closeConn(t, a, sess)
	sess, w2 := tc.connectOnce(t, a, a.token, false)
	tc.closeConn(t, a, sess)
	// Only the newest welcome's token is pending: the lost one was replaced.
	wantTokenRefused(t, tc, "a lost welcome's token after the next welcome", lost1.SessionToken)

	// w2 did arrive, only its ack was lost: presenting it confirms it and retires the bootstrap.
	sess, lost3 := tc.connectOnce(t, a, w2.SessionToken, false)
	tc.closeConn(t, a, sess)
	wantTokenRefused(t, tc, "the bootstrap token once a session was presented", a.token)

	// lost3 never arrived: w2 still works, and this time the welcome is acknowledged.
	sess, w4 := tc.connectOnce(t, a, w2.SessionToken, true)
	tc.closeConn(t, a, sess)
	for name, token := range map[string]string{"bootstrap": a.token, "lost first": lost1.SessionToken,
		"second": w2.SessionToken, "lost third": lost3.SessionToken} {
		wantTokenRefused(t, tc, name+" token after an acknowledged welcome", token)
	}
	tc.connectOnce(t, a, w4.SessionToken, true)
}

// The runner's end of a connection that a test can freeze: from then on nothing it sends leaves
// and nothing that arrives is delivered, as when the network drops without either end noticing.
type freezableConn struct {
	net.Conn
	frozen atomic.Bool
}

func (c *freezableConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.frozen.Load() {
			return n, err
		}
	}
}

func (c *freezableConn) Write(p []byte) (int, error) {
	if c.frozen.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// A second connection with the runner's current token while the runner is connected is refused
// (unauthorized, with the status a runner retries), recorded as a workspace event, and changes
// nothing: the live connection keeps serving and its token keeps working.
func TestSecondRunnerConnectionRefused(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	sess, w := tc.connectOnce(t, a, a.token, true)
	live, _ := tc.s.hub.Get(a.allocationID)
	// The real runner answers an operation the controller opens.
	answerOps(sess)
	serves := func(id string) {
		t.Helper()
		c, ok := tc.s.hub.Get(a.allocationID)
		if !ok || c != live {
			t.Fatalf("%s: the live connection was replaced or dropped", id)
		}
		st, err := c.Open(protocol.OpServiceList, id, 0, nil)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		defer st.Close()
		var tr protocol.Trailer
		if err := protocol.ReadJSON(st, &tr); err != nil || !tr.OK || string(tr.Result) != `"`+id+`"` {
			t.Fatalf("%s: %+v, %v", id, tr, err)
		}
	}
	serves("before")

	for _, token := range []string{w.SessionToken, w.SessionToken} {
		other, resp := tc.dial(t, token)
		if other != nil {
			t.Fatal("a second connection with the current token was accepted")
		}
		wantRefused(t, "second connection", resp, protocol.StatusAllocationBusy, protocol.CodeUnauthorized)
	}
	if sess.IsClosed() {
		t.Fatal("the live connection was closed")
	}
	serves("after")
	evs, err := tc.s.store.ListEvents(context.Background(), a.workspaceID)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, e := range evs {
		if strings.Contains(e.Cause, "runner connection from") && strings.Contains(e.Cause, "refused") && strings.Contains(e.Cause, a.allocationID) {
			refused++
			if e.From != e.To || e.To != api.StateProvisioning {
				t.Fatalf("the refusal changed the workspace's state: %+v", e)
			}
		}
	}
	if refused != 2 {
		t.Fatalf("events %+v; want the two refused connections", evs)
	}
	// The refusals spent nothing: the runner's token still works once it reconnects.
	if rec := tc.allocState(t, a.allocationID); rec.SessionHash != hashToken(w.SessionToken) || rec.PendingSessionHash != "" {
		t.Fatalf("the refusals changed the tokens: %+v", rec)
	}
	tc.closeConn(t, a, sess)
	tc.connectOnce(t, a, w.SessionToken, true)
}

// A runner whose network dropped without the controller noticing (a half-open session) gets back
// in: the old session does not answer the probe, so it is closed and the new one admitted.
func TestRunnerReconnectsOverHalfOpenSession(t *testing.T) {
	tc := newTestController(t)
	a := tc.addAllocation(t, "a")
	var frozen *freezableConn
	sess, resp := tc.dialWrapped(t, a.token, func(c net.Conn) net.Conn {
		frozen = &freezableConn{Conn: c}
		return frozen
	})
	if sess == nil {
		t.Fatalf("refused: %s", resp.Status)
	}
	w := welcome(t, hello(t, sess, goodHello(a.allocationID)))
	eventually(t, "runner registered", func() bool { _, ok := tc.s.hub.Get(a.allocationID); return ok })
	old, _ := tc.s.hub.Get(a.allocationID)
	frozen.frozen.Store(true)

	start := time.Now()
	again := tc.mustDial(t, w.SessionToken)
	h := goodHello(a.allocationID)
	h.PID = 43
	w2 := welcome(t, hello(t, again, h))
	if took := time.Since(start); took > probeTimeout+5*time.Second {
		t.Fatalf("the reconnect took %v", took)
	}
	select {
	case <-old.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the half-open session was not closed")
	}
	eventually(t, "the reconnected runner registered", func() bool {
		c, ok := tc.s.hub.Get(a.allocationID)
		return ok && c.Hello.PID == 43
	})
	if w2.SessionToken == w.SessionToken {
		t.Fatal("the token was not rotated")
	}
}
