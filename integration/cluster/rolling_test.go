package cluster

import (
	"fmt"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/store"
)

// TestClusterRollingRestart: each of three controllers is restarted in turn, gracefully, while
// every workspace is kept busy through the balancer; no operation may fail.
//
// It follows the procedure an operator restarting a controller of a cluster follows (an
// upgrade, a configuration change), one controller at a time:
//
//  1. Take it out of the balancer (HAProxy: `set server controllers/NAME state maint` on the
//     admin socket, or `drain`): no new request and no runner's reconnection lands on it.
//     Requests it is serving go on.
//  2. Stop it with SIGTERM and wait for it to exit. It lets its HTTP requests finish, and it
//     gives up the runners it holds: their connections close, and they reconnect through the
//     balancer to the other controllers at once. Requests other controllers send to those
//     runners meanwhile are answered unavailable, which clients retry.
//  3. Start it with the same data directory, address and flags (it keeps its cluster id).
//  4. Put it back in the balancer (`state ready`) and wait until the balancer's health check
//     sees it up.
//  5. Wait until every runner is connected again (`tether workspace ls`: connected) before the
//     next controller: two controllers down at once would leave runners nowhere to go.
func TestClusterRollingRestart(t *testing.T) {
	const n = 6
	c := h.New(t, h.Options{Controllers: 3})
	cl := c.Client(t)
	fleet := createFleet(t, cl, "roll", n)
	var ids []string
	for _, w := range fleet {
		ids = append(ids, w.Alloc)
	}
	tr := startTraffic(cl, fleet)
	defer tr.Stop()
	tr.WaitCycles(t, 3, time.Minute)

	type window struct {
		name     string
		from, to time.Time
	}
	var windows []window
	// Three times round the cluster: each restart moves the runners the controller held to the
	// others, so every controller stops holding runners that came from each of the others.
	const rounds = 3
	for k := range rounds * len(c.Controllers) {
		ctl := c.Controllers[k%len(c.Controllers)]
		id := ctl.ID(t)
		var held []string
		for aid, a := range allocations(t, c, ids...) {
			if a.Owner == id {
				held = append(held, aid)
			}
		}
		from := time.Now()
		c.LB.SetMaint(t, ctl.Name, true)
		stopAt := time.Now()
		ctl.Stop(t)
		stopped := time.Now()
		ctl.Start(t)
		c.LB.SetMaint(t, ctl.Name, false)
		c.LB.WaitState(t, ctl.Name, "UP")
		var allocs map[string]Allocation
		eventually(t, takeoverBound, "every runner connected to a running controller", func() bool {
			allocs = allocations(t, c, ids...)
			for _, a := range allocs {
				if a.State != store.AllocConnected || a.Owner == "" {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprintf("%+v", allocs) })
		var took []time.Duration
		for _, aid := range held {
			took = append(took, allocs[aid].OwnerSince.Sub(stopAt))
		}
		name := fmt.Sprintf("%s (restart %d)", ctl.Name, k+1)
		t.Logf("restart of %s: stopped in %s, serving again after %s; its %d runners owned again after p50 %s, max %s (from SIGTERM)",
			name, stopped.Sub(stopAt).Round(time.Millisecond), time.Since(from).Round(time.Millisecond), len(held),
			percentile(took, 50).Round(time.Millisecond), percentile(took, 100).Round(time.Millisecond))
		// The traffic went on and every workspace saw it before the next restart.
		tr.WaitCycles(t, 2, time.Minute)
		windows = append(windows, window{name, from, time.Now()})
	}
	tr.Stop()

	classes := []string{"outside the restarts"}
	for _, w := range windows {
		classes = append(classes, "during the restart of "+w.name)
	}
	// The windows follow each other; an operation is put in the one in which it ended (failed).
	failures := report(t, tr.Records(), classes, func(r opRecord) string {
		for _, w := range windows {
			if !r.end.Before(w.from) && r.end.Before(w.to) {
				return "during the restart of " + w.name
			}
		}
		return classes[0]
	})
	for _, cls := range classes {
		if k := len(failures[cls]); k > 0 {
			t.Errorf("%d operations failed %s", k, cls)
		}
	}
	for _, r := range tr.StaleAccepted() {
		t.Errorf("workspace %s: %v", r.ws, r.err)
	}
	tr.CheckNoStaleFiles(t)
	checkUsable(t, cl, fleet, "after the rolling restart")
	checkServes(t, cl, fleet, "roll-after")
}
