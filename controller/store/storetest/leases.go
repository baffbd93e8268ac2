package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

func testLeases(t *testing.T, s store.Store, clock *clockwork.FakeClock) {
	ctx := context.Background()
	w, _ := create(t, s, "leased", base)

	a, err := s.AcquireLease(ctx, w.ID, "alice", time.Minute)
	if err != nil || a.Epoch != 1 || a.Holder != "alice" {
		t.Fatalf("first acquire: %+v, %v", a, err)
	}
	_, err = s.AcquireLease(ctx, w.ID, "bob", time.Minute)
	wantCode(t, "acquire of a held lease", err, protocol.CodeLeaseHeld)
	if got, err := s.GetWorkspace(ctx, w.ID); err != nil || got.Epoch != 1 {
		t.Fatalf("workspace epoch after one lease: %d, %v", got.Epoch, err)
	}
	if _, err := s.RenewLease(ctx, w.ID, a.Epoch, time.Minute); err != nil {
		t.Fatalf("renew: %v", err)
	}
	_, err = s.RenewLease(ctx, w.ID, a.Epoch+1, time.Minute)
	wantCode(t, "renew with a wrong epoch", err, protocol.CodeStaleEpoch)
	if err := s.ReleaseLease(ctx, w.ID, a.Epoch); err != nil {
		t.Fatalf("release: %v", err)
	}
	wantCode(t, "second release", s.ReleaseLease(ctx, w.ID, a.Epoch), protocol.CodeStaleEpoch)
	if _, held, err := s.CurrentLease(ctx, w.ID); err != nil || held {
		t.Fatalf("lease after release: held=%v, %v", held, err)
	}

	// The epoch only grows, across holders, expiry and bumps.
	b, err := s.AcquireLease(ctx, w.ID, "bob", time.Millisecond)
	if err != nil || b.Epoch != 2 {
		t.Fatalf("acquire after release: %+v, %v", b, err)
	}
	clock.Advance(time.Millisecond - time.Microsecond)
	if _, held, _ := s.CurrentLease(ctx, w.ID); !held {
		t.Fatal("a 1 ms lease is not current 999 µs after it was acquired")
	}
	clock.Advance(time.Microsecond) // the 1 ms lease expires
	if _, held, _ := s.CurrentLease(ctx, w.ID); held {
		t.Fatal("an expired lease is still current")
	}
	wantCode(t, "renew of an expired lease", func() error { _, err := s.RenewLease(ctx, w.ID, b.Epoch, time.Minute); return err }(), protocol.CodeStaleEpoch)
	c, err := s.AcquireLease(ctx, w.ID, "carol", time.Minute)
	if err != nil || c.Epoch != 3 {
		t.Fatalf("acquire after expiry: %+v, %v", c, err)
	}
	e, err := s.BumpEpoch(ctx, w.ID)
	if err != nil || e != 4 {
		t.Fatalf("bump: %d, %v", e, err)
	}
	if _, held, _ := s.CurrentLease(ctx, w.ID); held {
		t.Fatal("a bump left the old lease in place")
	}
	_, err = s.AcquireLease(ctx, "ws_missing", "x", time.Minute)
	wantCode(t, "acquire on a missing workspace", err, protocol.CodeNotFound)
}

// testLeaseRace: 1,000 acquirers race in rounds; each round exactly one wins, and every
// winner's epoch is new and higher than the last.
func testLeaseRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	w, _ := create(t, s, "raced", base)
	const rounds, racers = 50, 20 // 1,000 acquisitions in all
	var last uint64
	for round := range rounds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []api.Lease
		for i := range racers {
			wg.Go(func() {
				l, err := s.AcquireLease(ctx, w.ID, fmt.Sprintf("r%d-%d", round, i), time.Minute)
				if err == nil {
					mu.Lock()
					winners = append(winners, l)
					mu.Unlock()
				} else if protocol.CodeOf(err) != protocol.CodeLeaseHeld {
					t.Errorf("racer: %v", err)
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d writers won the lease: %+v", round, len(winners), winners)
		}
		if winners[0].Epoch <= last {
			t.Fatalf("round %d: epoch %d does not grow past %d", round, winners[0].Epoch, last)
		}
		last = winners[0].Epoch
		if err := s.ReleaseLease(ctx, w.ID, last); err != nil {
			t.Fatal(err)
		}
	}
}
