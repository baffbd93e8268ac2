package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func sameMember(t *testing.T, got, want store.Member) {
	t.Helper()
	if got.ID != want.ID || got.Address != want.Address || got.Version != want.Version ||
		!got.StartedAt.Equal(want.StartedAt) || !got.HeartbeatAt.Equal(want.HeartbeatAt) ||
		got.StartedAt.Location() != time.UTC || got.HeartbeatAt.Location() != time.UTC {
		t.Fatalf("member = %+v\nwant     %+v", got, want)
	}
}

// A heartbeat registers a member or updates it, at the store's time; ListMembers orders by id.
func testMembers(t *testing.T, s store.Store, clock *clockwork.FakeClock) {
	ctx := context.Background()
	if list, err := s.ListMembers(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("empty store lists %#v, %v", list, err)
	}
	b := store.Member{ID: "ctl-b", Address: "http://10.0.0.2:7070", Version: "1.0", StartedAt: base.In(time.FixedZone("x", 3600))}
	at, err := s.Heartbeat(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().UTC(); !at.Equal(want) {
		t.Fatalf("Heartbeat at %v; want the store's clock, %v", at, want)
	}
	b.HeartbeatAt = at
	got, err := s.GetMember(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameMember(t, got, b)

	clock.Advance(time.Second)
	a := store.Member{ID: "ctl-a", Address: "http://10.0.0.1:7070", Version: "1.0", StartedAt: base.Add(time.Second)}
	if a.HeartbeatAt, err = s.Heartbeat(ctx, a); err != nil {
		t.Fatal(err)
	}
	// b restarted on a new version and address: the same id is updated, not added.
	clock.Advance(time.Second)
	b.Address, b.Version, b.StartedAt = "http://10.0.0.3:7070", "1.1", base.Add(time.Hour)
	if b.HeartbeatAt, err = s.Heartbeat(ctx, b); err != nil {
		t.Fatal(err)
	}
	if !b.HeartbeatAt.Equal(clock.Now()) {
		t.Fatalf("second heartbeat at %v; want %v", b.HeartbeatAt, clock.Now())
	}
	list, err := s.ListMembers(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListMembers = %+v, %v; want a and b", list, err)
	}
	sameMember(t, list[0], a)
	sameMember(t, list[1], b)

	if err := s.RemoveMember(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMember(ctx, a.ID); err != nil {
		t.Fatalf("removing a missing member: %v", err)
	}
	_, err = s.GetMember(ctx, a.ID)
	wantCode(t, "GetMember of a removed member", err, protocol.CodeNotFound)
	if list, err := s.ListMembers(ctx); err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Fatalf("ListMembers after removal = %+v, %v", list, err)
	}
}

// The cluster secret is made once: callers racing for the first one all get the same.
func testClusterSecret(t *testing.T, s store.Store) {
	ctx := context.Background()
	secrets := make([]string, 8)
	errs := make([]error, len(secrets))
	var wg sync.WaitGroup
	for i := range secrets {
		wg.Go(func() { secrets[i], errs[i] = s.ClusterSecret(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ClusterSecret #%d: %v", i, err)
		}
	}
	if len(secrets[0]) < 32 {
		t.Fatalf("cluster secret %q is too short", secrets[0])
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(secrets))); len(distinct) != 1 {
		t.Fatalf("callers got different secrets: %q", distinct)
	}
	again, err := s.ClusterSecret(ctx)
	if err != nil || again != secrets[0] {
		t.Fatalf("ClusterSecret later = %q, %v; want %q", again, err, secrets[0])
	}
}
