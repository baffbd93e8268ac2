package controller

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/yamux"
	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
	"github.com/tetherhq/tether/protocol"
)

// newClusterPair is two controllers sharing one PostgreSQL database (and clock), each having
// written its first heartbeat with the address it serves on.
func newClusterPair(t *testing.T, clock clockwork.Clock) (a, b *testController) {
	t.Helper()
	url := pgtest.Database(t, "")
	opts := func(c *Config) { c.StoreURL = url; c.Clock = clock }
	a, b = newTestController(t, opts), newTestController(t, opts)
	for _, tc := range []*testController{a, b} {
		tc.s.members.SetAddress(tc.url)
		if err := tc.s.members.Beat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// answerOps makes a runner session answer every operation with its request id.
func answerOps(sess *yamux.Session) {
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			var h protocol.Header
			if protocol.ReadJSON(st, &h) == nil {
				_ = protocol.WriteJSON(st, protocol.Trailer{OK: true, Result: []byte(`"` + h.ID + `"`)})
			}
			st.Close()
		}
	}()
}

// callThrough opens an operation on the runner of allocationID as tc reaches it and checks the
// runner answered it.
func callThrough(t *testing.T, tc *testController, allocationID, id string) error {
	t.Helper()
	c, err := tc.s.reach(context.Background(), allocationID)
	if err != nil {
		return err
	}
	st, err := c.Open(protocol.OpServiceList, id, 0, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	var tr protocol.Trailer
	if err := protocol.ReadJSON(st, &tr); err != nil || !tr.OK || string(tr.Result) != `"`+id+`"` {
		t.Fatalf("%s through %s: %+v, %v", id, tc.s.id, tr, err)
	}
	return nil
}

// A runner held by one controller is reached from the other through a tunnel, and a second
// connection of it at the other controller is refused while the first answers.
func TestClusterReachesRunnerHeldByPeer(t *testing.T) {
	a, b := newClusterPair(t, clockwork.NewRealClock())
	al := a.addAllocation(t, "w")
	sess, w := a.connectOnce(t, al, al.token, true)
	answerOps(sess)
	if rec := a.allocState(t, al.allocationID); rec.Owner != a.s.id || rec.State != "connected" {
		t.Fatalf("allocation after the hello at A: %+v; want owned by %s", rec, a.s.id)
	}
	if !b.s.connected(context.Background(), al.allocationID) {
		t.Fatal("B does not see the runner A holds as connected")
	}
	for _, id := range []string{"one", "two"} {
		if err := callThrough(t, b, al.allocationID, id); err != nil {
			t.Fatalf("B reaching the runner A holds: %v", err)
		}
	}
	// The runner's token at B while it is connected to A and answering: a second connection.
	other, resp := b.dial(t, w.SessionToken)
	if other != nil {
		t.Fatal("B accepted a second connection of a runner A holds")
	}
	wantRefused(t, "second connection at B", resp, protocol.StatusAllocationBusy, protocol.CodeUnauthorized)
	if err := callThrough(t, b, al.allocationID, "after"); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	// Its connection at A ends: the tunnel ends with it, and B says why it cannot reach it.
	a.closeConn(t, al, sess)
	eventually(t, "B sees the runner gone", func() bool {
		_, err := b.s.reach(context.Background(), al.allocationID)
		return protocol.CodeOf(err) == protocol.CodeUnavailable
	})
	if rec := a.allocState(t, al.allocationID); rec.Owner != "" || rec.State != "disconnected" {
		t.Fatalf("allocation after the runner left A: %+v", rec)
	}
}

// When the owner's heartbeat expired, the other controller says so at once instead of waiting
// on it, and takes the runner over when it reconnects there — though the dead owner's stale
// connection still answers.
func TestClusterTakesOverFromDeadOwner(t *testing.T) {
	clock := clockwork.NewFakeClock()
	a, b := newClusterPair(t, clock)
	al := a.addAllocation(t, "w")
	sess, w := a.connectOnce(t, al, al.token, true)
	answerOps(sess)
	if err := callThrough(t, b, al.allocationID, "alive"); err != nil {
		t.Fatal(err)
	}
	// A stops writing heartbeats (it died, or lost the database); B goes on.
	clock.Advance(b.s.members.Timing().TTL + b.s.members.Timing().Interval)
	if err := b.s.members.Beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.s.tunnels.closeAll() // a tunnel opened before is dropped like the dead owner's socket
	_, err := b.s.reach(context.Background(), al.allocationID)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || !strings.Contains(err.Error(), "heartbeat") {
		t.Fatalf("reaching a runner whose owner's heartbeat expired: %v; want unavailable naming the heartbeat", err)
	}
	again := b.mustDial(t, w.SessionToken)
	answerOps(again)
	welcome(t, hello(t, again, goodHello(al.allocationID)))
	eventually(t, "B holds the runner", func() bool { _, ok := b.s.hub.Get(al.allocationID); return ok })
	if rec := b.allocState(t, al.allocationID); rec.Owner != b.s.id {
		t.Fatalf("allocation after the take-over: %+v; want owned by %s", rec, b.s.id)
	}
	if err := callThrough(t, b, al.allocationID, "taken"); err != nil {
		t.Fatal(err)
	}
	// The old connection ending at A later leaves B's ownership alone.
	a.closeConn(t, al, sess)
	if rec := b.allocState(t, al.allocationID); rec.Owner != b.s.id || rec.State != "connected" {
		t.Fatalf("A's late disconnect rewrote B's allocation: %+v", rec)
	}
}

// Peer routes take the cluster secret and nothing else: not the operator token, not a runner's.
func TestClusterInternalRoutesNeedThePeerSecret(t *testing.T) {
	a, _ := newClusterPair(t, clockwork.NewRealClock())
	for _, auth := range []string{"", "Bearer " + a.s.OperatorToken(), "Bearer tpeer_wrong"} {
		req, _ := http.NewRequest(http.MethodPost, a.url+"/internal/v1/allocations/al_x/disconnect", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("internal route with %q: %s; want 401", auth, resp.Status)
		}
	}
}
