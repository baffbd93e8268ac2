package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
)

// An epoch names one writer of one workspace in the whole store: leases and bumps of different
// workspaces, one after another or racing, never get the same epoch, and each workspace's still
// grows.
func testEpochsStoreWide(t *testing.T, s store.Store) {
	ctx := context.Background()
	parent, _ := create(t, s, "epoch-parent", base)
	child, _ := create(t, s, "epoch-child", base)
	seen := map[uint64]string{}
	last := map[string]uint64{}
	take := func(id string, epoch uint64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[epoch]; dup {
			t.Fatalf("epoch %d given to %s and to %s", epoch, other, id)
		}
		if epoch <= last[id] {
			t.Fatalf("epoch of %s went from %d to %d", id, last[id], epoch)
		}
		seen[epoch], last[id] = id, epoch
	}
	for _, id := range []string{parent.ID, child.ID, parent.ID, child.ID} {
		l, err := s.AcquireLease(ctx, id, "holder", time.Minute)
		take(id, l.Epoch, err)
		if err := s.ReleaseLease(ctx, id, l.Epoch); err != nil {
			t.Fatal(err)
		}
		e, err := s.BumpEpoch(ctx, id)
		take(id, e, err)
	}
	// Racing on many workspaces: still one epoch each.
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		w, _ := create(t, s, fmt.Sprintf("epoch-race-%d", i), base)
		ids[i] = w.ID
	}
	epochs := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l struct{ Epoch uint64 }
			if i%2 == 0 {
				ll, err := s.AcquireLease(ctx, id, "racer", time.Minute)
				l.Epoch, errs[i] = ll.Epoch, err
			} else {
				l.Epoch, errs[i] = s.BumpEpoch(ctx, id)
			}
			epochs[i] = l.Epoch
		}()
	}
	wg.Wait()
	for i, id := range ids {
		take(id, epochs[i], errs[i])
	}
	if got, err := s.GetWorkspace(ctx, child.ID); err != nil || got.Epoch != last[child.ID] {
		t.Fatalf("child's recorded epoch: %d, %v; want %d", got.Epoch, err, last[child.ID])
	}
}
