package storetest

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/controller/store"
)

// A cluster lock has one holder at a time; release frees it, and releasing twice is harmless.
func testClusterLock(t *testing.T, s store.Store) {
	ctx := context.Background()
	release, ok, err := s.TryClusterLock(ctx, "gc")
	if err != nil || !ok {
		t.Fatalf("TryClusterLock(gc) = %v, %v; want it taken", ok, err)
	}
	if _, ok, err := s.TryClusterLock(ctx, "gc"); err != nil || ok {
		t.Fatalf("TryClusterLock(gc) while held = %v, %v; want false", ok, err)
	}
	other, ok, err := s.TryClusterLock(ctx, "reaper")
	if err != nil || !ok {
		t.Fatalf("another lock while gc is held = %v, %v; want it taken", ok, err)
	}
	release()
	release()
	again, ok, err := s.TryClusterLock(ctx, "gc")
	if err != nil || !ok {
		t.Fatalf("TryClusterLock(gc) after release = %v, %v; want it taken", ok, err)
	}
	again()
	other()

	// Of many trying at once, one wins: it holds the lock until every attempt returned.
	var wins, tried atomic.Int32
	var wg sync.WaitGroup
	hold := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			release, ok, err := s.TryClusterLock(ctx, "race")
			tried.Add(1)
			if err != nil {
				t.Errorf("TryClusterLock(race): %v", err)
				return
			}
			if ok {
				wins.Add(1)
				<-hold
				release()
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); tried.Load() < 8 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	if n, m := wins.Load(), tried.Load(); n != 1 || m != 8 {
		t.Fatalf("%d of %d concurrent attempts took the lock; want 1 of 8", n, m)
	}
}

// Uploads are live from their last touch; done ones are gone.
func testUploads(t *testing.T, s store.Store, clock *clockwork.FakeClock) {
	ctx := context.Background()
	live := func(since time.Time, want ...string) {
		t.Helper()
		got, err := s.LiveUploads(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		w := map[string]bool{}
		for _, k := range want {
			w[k] = true
		}
		if got == nil || !maps.Equal(got, w) {
			t.Fatalf("LiveUploads(%v) = %v; want %v", since, got, w)
		}
	}
	start := clock.Now()
	live(start)
	if err := s.TouchUpload(ctx, "blobs/a", "ctl-1"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if err := s.TouchUpload(ctx, "blobs/b", "ctl-2"); err != nil {
		t.Fatal(err)
	}
	live(start, "blobs/a", "blobs/b") // touched at since counts
	live(start.Add(time.Second), "blobs/b")
	// A touch renews it.
	clock.Advance(time.Minute)
	if err := s.TouchUpload(ctx, "blobs/a", "ctl-1"); err != nil {
		t.Fatal(err)
	}
	live(clock.Now(), "blobs/a")
	if err := s.DoneUpload(ctx, "blobs/a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DoneUpload(ctx, "blobs/never"); err != nil {
		t.Fatalf("DoneUpload of an unknown key: %v", err)
	}
	live(start, "blobs/b")
}

// next returns the next id a watch delivers, failing after a while.
func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case id, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no allocation change delivered in 10s")
	}
	return ""
}

// WatchAllocations delivers the ids ClaimAllocation, ReleaseAllocation, DisownAllocations and
// UpdateAllocation changed, to every watcher, until its context ends.
func testWatchAllocations(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.WatchAllocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	otherCtx, cancelOther := context.WithCancel(ctx)
	other, err := s.WatchAllocations(otherCtx)
	if err != nil {
		t.Fatal(err)
	}
	_, a := create(t, s, "watched", base)
	_, b := create(t, s, "watched-too", base)
	want := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if got := next(t, ch); got != id {
				t.Fatalf("watch delivered %q; want %q", got, id)
			}
		}
	}
	if err := s.ClaimAllocation(ctx, a.ID, "ctl-1", "/w", "1"); err != nil {
		t.Fatal(err)
	}
	want(a.ID)
	if got := next(t, other); got != a.ID {
		t.Fatalf("second watcher got %q; want %q", got, a.ID)
	}
	cancelOther()
	for range other { // closed once its context ended (what was buffered comes first)
	}
	// A release that changes nothing says nothing.
	if ok, err := s.ReleaseAllocation(ctx, a.ID, "ctl-2"); err != nil || ok {
		t.Fatalf("release by a non-owner = %v, %v", ok, err)
	}
	if ok, err := s.ReleaseAllocation(ctx, a.ID, "ctl-1"); err != nil || !ok {
		t.Fatalf("release by the owner = %v, %v", ok, err)
	}
	want(a.ID)
	if err := s.UpdateAllocation(ctx, b.ID, store.AllocConnected, "", ""); err != nil {
		t.Fatal(err)
	}
	want(b.ID)
	if err := s.ClaimAllocation(ctx, b.ID, "ctl-1", "", ""); err != nil {
		t.Fatal(err)
	}
	want(b.ID)
	if ids, err := s.DisownAllocations(ctx, "ctl-1"); err != nil || len(ids) != 1 {
		t.Fatalf("DisownAllocations = %v, %v", ids, err)
	}
	want(b.ID)
	// A refused change says nothing either: the next id is the one that follows.
	if err := s.UpdateAllocation(ctx, a.ID, store.AllocDestroyed, "", ""); err != nil {
		t.Fatal(err)
	}
	want(a.ID)
	if err := s.ClaimAllocation(ctx, a.ID, "ctl-1", "", ""); err == nil {
		t.Fatal("claimed a destroyed allocation")
	}
	if err := s.UpdateAllocation(ctx, b.ID, store.AllocFailed, "", ""); err != nil {
		t.Fatal(err)
	}
	want(b.ID)
	cancel()
	for range ch {
	}
	if _, err := s.WatchAllocations(ctx); err == nil {
		t.Fatal("WatchAllocations with an ended context succeeded")
	}
}

// Close ends the watches still open.
func testWatchClosed(t *testing.T, s store.Store) {
	ch, err := s.WatchAllocations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a watch delivered after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close left a watch open")
	}
	if _, err := s.WatchAllocations(context.Background()); err == nil {
		t.Fatal("WatchAllocations after Close succeeded")
	}
}
