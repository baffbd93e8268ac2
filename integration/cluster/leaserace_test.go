package cluster

import (
	"context"
	"fmt"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// TestClusterLeaseRace: 1,000 rounds of two clients, each talking to a different controller
// directly, racing to acquire the writer lease of one workspace whose runner one controller
// holds (the others reach it through tunnels). Every round exactly one wins and the other is
// refused lease_held; the winner's epoch is above every earlier one; a write under it is
// accepted, and a write under the loser's stale epoch (the last it held, or the previous round's)
// is refused stale_epoch, through the loser's own controller. The winner then releases.
func TestClusterLeaseRace(t *testing.T) {
	const rounds = 1000
	c := h.New(t, h.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ws, err := c.Client(t).CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "lease-race", Provider: "local"})
	if err != nil || ws.State != api.StateReady {
		t.Fatalf("create: %+v, %v", ws, err)
	}
	direct := make([]*client.Client, len(c.Controllers))
	for i, ctl := range c.Controllers {
		if direct[i], err = client.New(ctl.URL(), c.Token); err != nil {
			t.Fatal(err)
		}
	}

	holders := [2]string{"a", "b"}
	var last [2]uint64 // the epoch each holder held last
	var wins [2]int
	var prev uint64
	var took []time.Duration
	for round := range rounds {
		// The pair of controllers turns every round: c1/c2, c2/c3, c3/c1.
		via := [2]int{round % len(direct), (round + 1) % len(direct)}
		start := time.Now()
		var got [2]api.Lease
		var errs [2]error
		ready := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				<-ready
				got[i], errs[i] = direct[via[i]].AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: holders[i], TTL: "1m"})
			})
		}
		close(ready)
		wg.Wait()
		took = append(took, time.Since(start))

		w := -1
		for i := range 2 {
			switch {
			case errs[i] == nil && w < 0:
				w = i
			case errs[i] == nil:
				t.Fatalf("round %d: both won: %s epoch %d via %s, %s epoch %d via %s", round,
					holders[0], got[0].Epoch, c.Controllers[via[0]].Name, holders[1], got[1].Epoch, c.Controllers[via[1]].Name)
			case protocol.CodeOf(errs[i]) != protocol.CodeLeaseHeld:
				t.Fatalf("round %d: %s via %s: %v; want the lease or lease_held", round, holders[i], c.Controllers[via[i]].Name, errs[i])
			}
		}
		if w < 0 {
			t.Fatalf("round %d: nobody won: %v; %v", round, errs[0], errs[1])
		}
		l, lose := got[w], 1-w
		if l.Epoch <= prev || l.Holder != holders[w] {
			t.Fatalf("round %d: %s won %+v after epoch %d", round, holders[w], l, prev)
		}
		wins[w]++
		stale := last[lose]
		if stale == 0 {
			stale = prev
		}
		prev, last[w] = l.Epoch, l.Epoch

		winner, loser := direct[via[w]], direct[via[lose]]
		if _, err := winner.WithEpoch(l.Epoch).WriteFile(ctx, ws.ID, "holder.txt", strings.NewReader(fmt.Sprintf("%s %d\n", holders[w], round)), client.WriteOptions{Replace: true}); err != nil {
			t.Fatalf("round %d: write under the winner's epoch %d: %v", round, l.Epoch, err)
		}
		if stale > 0 {
			_, err := loser.WithEpoch(stale).WriteFile(ctx, ws.ID, "holder.txt", strings.NewReader("stale\n"), client.WriteOptions{Replace: true})
			if protocol.CodeOf(err) != protocol.CodeStaleEpoch {
				t.Fatalf("round %d: write under %s's stale epoch %d (the lease is at %d) via %s: %v; want stale_epoch",
					round, holders[lose], stale, l.Epoch, c.Controllers[via[lose]].Name, err)
			}
		}
		if err := winner.ReleaseLease(ctx, ws.ID, l.Epoch); err != nil {
			t.Fatalf("round %d: release epoch %d: %v", round, l.Epoch, err)
		}
	}
	t.Logf("%d rounds: %s won %d, %s won %d; last epoch %d; the race (two acquires at once) took p50 %s, p99 %s, max %s",
		rounds, holders[0], wins[0], holders[1], wins[1], prev,
		percentile(took, 50).Round(time.Millisecond), percentile(took, 99).Round(time.Millisecond), percentile(took, 100).Round(time.Millisecond))
	// The last write that was accepted is the last winner's.
	var sb strings.Builder
	if _, err := direct[0].ReadFile(ctx, ws.ID, "holder.txt", &sb, client.ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(" %d\n", rounds-1); !strings.HasSuffix(sb.String(), want) || strings.Contains(sb.String(), "stale") {
		t.Fatalf("holder.txt holds %q; want the last round's winner", sb.String())
	}
}
