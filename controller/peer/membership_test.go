package peer

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore"
)

// failingMembers is a real store whose heartbeats can be made to fail, as a controller cut off
// from its database sees them.
type failingMembers struct {
	store.Members
	fail atomic.Bool
}

func (f *failingMembers) Heartbeat(ctx context.Context, m store.Member) (time.Time, error) {
	if f.fail.Load() {
		return time.Time{}, errors.New("database unreachable")
	}
	return f.Members.Heartbeat(ctx, m)
}

func TestMembershipLapsesAndRecovers(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	st, err := sqlstore.Open(ctx, "", t.TempDir(), sqlstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	members := &failingMembers{Members: st}
	timing := Timing{Interval: time.Second, TTL: 6 * time.Second, Lapse: 4 * time.Second}
	m := NewMembership(members, store.Member{ID: "ctl_a", Address: "http://a"}, timing, clock, slog.New(slog.DiscardHandler))
	if err := m.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.Owning() {
		t.Fatal("not owning after a heartbeat")
	}
	lapses := make(chan struct{}, 4)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx, func() { lapses <- struct{}{} }) }()
	defer func() { cancel(); <-done }()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}

	members.fail.Store(true)
	// One tick at a time: the loop is waiting on the ticker before each advance.
	for range 5 {
		clock.Advance(timing.Interval)
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	<-lapses
	if m.Owning() {
		t.Fatal("still owning after no heartbeat for the lapse")
	}
	peerView, err := st.GetMember(ctx, "ctl_a")
	if err != nil {
		t.Fatal(err)
	}
	// Seen from a peer: 5 s without a heartbeat is within the TTL, so peers still leave its
	// runners to it — after it let go of them itself at the lapse (4 s).
	if !m.Alive(store.Member{ID: "ctl_b", HeartbeatAt: peerView.HeartbeatAt}) {
		t.Fatal("a member whose heartbeat is 5 s old (TTL 6 s) is dead")
	}
	clock.Advance(timing.TTL)
	if m.Alive(store.Member{ID: "ctl_b", HeartbeatAt: peerView.HeartbeatAt}) {
		t.Fatal("a member whose heartbeat is older than the TTL is alive")
	}

	members.fail.Store(false)
	if err := m.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.Owning() {
		t.Fatal("not owning again after a heartbeat was written")
	}
	select {
	case <-lapses:
		t.Fatal("a second lapse without a second outage")
	default:
	}
}

// A controller alone on its store (SQLite in its locked data directory) has no peer to hand its
// runners to: heartbeats it cannot write (a busy disk) never make it let go of them.
func TestAloneMembershipNeverLapses(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	st, err := sqlstore.Open(ctx, "", t.TempDir(), sqlstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	members := &failingMembers{Members: st}
	timing := Timing{Interval: time.Second, TTL: 6 * time.Second, Lapse: 4 * time.Second}
	m := NewMembership(members, store.Member{ID: "ctl_a", Address: "http://a"}, timing, clock, slog.New(slog.DiscardHandler))
	m.SetAlone()
	if err := m.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	var lapses atomic.Int32
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx, func() { lapses.Add(1) }) }()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	members.fail.Store(true)
	for range 10 {
		clock.Advance(timing.Interval)
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-done
	if n := lapses.Load(); n != 0 || !m.Owning() {
		t.Fatalf("alone, 10 s without a heartbeat: %d lapse(s), owning %v; want none and owning", n, m.Owning())
	}
}
