package cluster

import (
	"bytes"
	"context"
	"fmt"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/protocol"
)

// takeoverBound bounds how long the runners of a killed controller may take to be owned again.
// It is a liveness check, not a timing assertion: a takeover waits out the dead owner's
// heartbeat (TTL 3 s) and the figures are logged; this only catches a takeover that never comes.
const takeoverBound = time.Minute

// TestClusterKillOwner: kill -9 of the controller holding half the runners, while every
// workspace is kept busy through the balancer (exec, files get, workspace show, and a write
// under a stale epoch that must be refused). The killed controller's runners live on and
// reconnect through the balancer; the controller each lands on waits out the dead one's
// heartbeat and takes it over. The test measures each runner's takeover from the kill to the
// new owner's claim (the store's owner_since), sorts every failed operation by when it
// started, and fails if any operation started once every runner was owned again failed, if a
// stale write was ever accepted, or if a workspace is unusable afterwards. The killed
// controller is then restarted and the whole cluster must serve, through the balancer and
// through that controller directly.
func TestClusterKillOwner(t *testing.T) {
	const n = 10
	c := h.New(t, h.Options{Controllers: 3})
	cl := c.Client(t)

	// Round robin would give each controller about a third of the runners. The case is
	// the controller holding half: the first half of the fleet is created while c1 alone is in
	// the balancer (its runners connect to c1), the rest while c1 is out of it.
	maint := func(on bool, names ...string) {
		for _, name := range names {
			c.LB.SetMaint(t, name, on)
		}
		if !on {
			c.WaitUp(t)
		}
	}
	maint(true, "c2", "c3")
	fleet := createFleet(t, cl, "kill-a", n/2)
	maint(false, "c2", "c3")
	maint(true, "c1")
	fleet = append(fleet, createFleet(t, cl, "kill-b", n-n/2)...)
	maint(false, "c1")

	ids := make([]string, len(fleet))
	for i, w := range fleet {
		ids[i] = w.Alloc
	}
	before := allocations(t, c, ids...)
	perOwner := map[string][]string{}
	for _, a := range before {
		if a.State != store.AllocConnected || a.Owner == "" {
			t.Fatalf("allocation %s is %s (owner %q) before the kill", a.ID, a.State, a.Owner)
		}
		perOwner[a.Owner] = append(perOwner[a.Owner], a.ID)
	}
	owners := slices.Collect(maps.Keys(perOwner))
	slices.SortFunc(owners, func(a, b string) int { return len(perOwner[b]) - len(perOwner[a]) })
	victim := byID(t, c, owners[0])
	if victim == nil {
		t.Fatalf("the store names owner %q, which is none of the controllers", owners[0])
	}
	held := perOwner[owners[0]]
	t.Logf("runners per controller before the kill: %s; killing %s (%d of %d)", describeOwners(t, c, perOwner), victim.Name, len(held), n)

	tr := startTraffic(cl, fleet)
	defer tr.Stop()
	tr.WaitCycles(t, 3, time.Minute)

	// The kill is a span: from SIGKILL to the process gone (its sockets closed), during which
	// the dying controller may still take a request and never answer it.
	killAt := time.Now()
	victim.Kill(t)
	killed := time.Now()
	t.Logf("%s killed at %s (gone %s later)", victim.Name, killAt.Format("15:04:05.000"), killed.Sub(killAt).Round(time.Millisecond))

	victimID := victim.ID(t)
	var after map[string]Allocation
	eventually(t, takeoverBound, "every runner of the killed controller to be owned by another", func() bool {
		after = allocations(t, c, held...)
		for _, id := range held {
			if a := after[id]; a.State != store.AllocConnected || a.Owner == "" || a.Owner == victimID {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%+v", after) })
	// Every runner was owned again at the latest claim: the instant the store recorded it.
	var allOwned time.Time
	var took []time.Duration
	for _, id := range held {
		a := after[id]
		took = append(took, a.OwnerSince.Sub(killAt))
		if a.OwnerSince.After(allOwned) {
			allOwned = a.OwnerSince
		}
	}
	t.Logf("takeover of %d runners, from the kill to the new owner's claim: p50 %s, p99 %s, max %s",
		len(took), percentile(took, 50).Round(time.Millisecond), percentile(took, 99).Round(time.Millisecond), percentile(took, 100).Round(time.Millisecond))

	// Operations keep going once every runner is owned again: those must all succeed.
	tr.WaitCycles(t, 3, time.Minute)
	tr.Stop()

	const (
		clsBefore   = "before the kill"
		clsInFlight = "in flight at the kill"
		clsTakeover = "started during the takeover (after the kill, before every runner was owned again)"
		clsAfter    = "started after every runner was owned again"
	)
	failures := report(t, tr.Records(), []string{clsBefore, clsInFlight, clsTakeover, clsAfter}, func(r opRecord) string {
		switch {
		case r.start.Before(killed) && r.end.After(killAt):
			return clsInFlight
		case r.start.Before(killAt):
			return clsBefore
		case r.start.Before(allOwned):
			return clsTakeover
		}
		return clsAfter
	})
	for _, cls := range []string{clsBefore, clsAfter} {
		if k := len(failures[cls]); k > 0 {
			t.Errorf("%d operations %s failed", k, cls)
		}
	}
	for _, r := range tr.StaleAccepted() {
		t.Errorf("workspace %s: %v", r.ws, r.err)
	}
	tr.CheckNoStaleFiles(t)

	// Runners the killed controller did not hold stayed where they were.
	for id, a := range allocations(t, c, ids...) {
		if was := before[id]; was.Owner != victimID && (a.Owner != was.Owner || a.State != store.AllocConnected) {
			t.Logf("allocation %s, held by %s before the kill, is now %s with owner %q", id, was.Owner, a.State, a.Owner)
		}
	}
	checkUsable(t, cl, fleet, "after the takeover, through the balancer")

	// The killed controller comes back with its data directory and id; the cluster serves,
	// through it directly too (its tunnels reach the runners' new owners).
	victim.Start(t)
	c.WaitUp(t)
	direct, err := client.New(victim.URL(), c.Token)
	if err != nil {
		t.Fatal(err)
	}
	checkUsable(t, direct, fleet, "through the restarted "+victim.Name)
	checkServes(t, cl, fleet, "kill-after")
}

// describeOwners is "c1 4, c2 2, c3 2" for runners per controller id.
func describeOwners(t *testing.T, c *h.Cluster, perOwner map[string][]string) string {
	t.Helper()
	var parts []string
	for _, ctl := range c.Controllers {
		parts = append(parts, fmt.Sprintf("%s %d", ctl.Name, len(perOwner[ctl.ID(t)])))
	}
	return strings.Join(parts, ", ")
}

// checkUsable runs a command under each workspace's lease and reads its data back, through cl.
func checkUsable(t *testing.T, cl *client.Client, fleet []*fleetWS, how string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, w := range fleet {
		var out bytes.Buffer
		exit, err := cl.WithEpoch(w.Epoch).Exec(ctx, w.ID, protocol.ExecArgs{Argv: []string{"echo", "usable"}}, nil, &out, io.Discard)
		if err != nil || exit.Status() != 0 || out.String() != "usable\n" {
			t.Errorf("%s: exec in %s: exit %d, %q, %v", how, w.ID, exit.Status(), out.String(), err)
			continue
		}
		var got bytes.Buffer
		if _, err := cl.ReadFile(ctx, w.ID, "data.txt", &got, client.ReadOptions{}); err != nil || !bytes.Equal(got.Bytes(), w.data) {
			t.Errorf("%s: read data.txt of %s: %d bytes, %v", how, w.ID, got.Len(), err)
		}
	}
}

// checkServes proves the whole cluster serves through the balancer: a new workspace lives its
// life, and every workspace of the fleet is removed (a local sandbox is destroyed on the
// controller that placed it, whichever request reached).
func checkServes(t *testing.T, cl *client.Client, fleet []*fleetWS, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: name, Provider: "local"})
	if err != nil || ws.State != api.StateReady {
		t.Fatalf("create a workspace: %+v, %v", ws, err)
	}
	var out bytes.Buffer
	if exit, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"echo", "new"}}, nil, &out, io.Discard); err != nil || exit.Status() != 0 || out.String() != "new\n" {
		t.Errorf("exec in a new workspace: exit %d, %q, %v", exit.Status(), out.String(), err)
	}
	if _, err := cl.DeleteWorkspace(ctx, ws.ID); err != nil {
		t.Errorf("remove the new workspace: %v", err)
	}
	for _, w := range fleet {
		if err := cl.ReleaseLease(ctx, w.ID, w.Epoch); err != nil {
			t.Errorf("release the lease of %s: %v", w.ID, err)
		}
		if _, err := cl.DeleteWorkspace(ctx, w.ID); err != nil {
			t.Errorf("remove %s: %v", w.ID, err)
		}
	}
}
