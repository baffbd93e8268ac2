package cluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/store"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"github.com/tetherhq/tether/protocol"
)

// Log lines of a controller's membership (controller/peer/membership.go) the test waits for.
const (
	lapseLine   = "dropping the runners held here"
	regainLine  = "heartbeat written again: acting as an owner again"
	cutIdx      = 0 // c1 is cut off
	partitionTO = 3 * time.Minute
)

// TestClusterPartition cuts a controller that owns two runners off the network (its veth down:
// no store, no balancer, no peer, while its process keeps running), then restores it.
//
// Local-provider runners are processes in the namespace of the controller that started them,
// and dial the balancer, so where a runner runs and which controller owns it are two things.
// With c2 and c3 in maintenance on the balancer, both runners connect to c1:
//   - tied, started by c1: its runner is cut off with c1 and can reach nobody until Restore;
//   - mover, started by c2: its runner stays reachable, notices its connection to c1 is dead
//     (no pong within protocol.PongWait, 30 s) and reconnects through the balancer to c2 or c3.
//
// What it shows:
//
//	(a) the cut controller stops acting as an owner once it cannot write its heartbeat: it logs
//	    lapseLine, and once its heartbeat expired the store names it owner of no connected
//	    allocation (the live controllers' upkeep disowned what it could not release itself);
//	(b) epochs fence the partition: leases moved to a new holder through a live controller right
//	    after the cut — while the store still named c1 the owner of both runners — and a write
//	    under the old epoch from a client on c1's side of the partition, through c1, does not
//	    land; after Restore, a write under the old epoch is refused stale_epoch by each
//	    controller (c1 included) and through the balancer, and one under the new epoch lands;
//	(c) mover is owned again by a live controller and usable through the balancer while c1 is
//	    still cut off (tied is unavailable, at once); after Restore, c1 writes heartbeats again,
//	    tied's runner reconnects and is usable through the balancer, and c1 admits a new runner
//	    steered to it.
//
// It cannot show what c1 would do with the runner it holds if it could still reach the runner
// but not the store: here the cut takes both away at once (tied's runner reaches c1 through
// the balancer, across the same link). The figures (how long each step took) are logged.
func TestClusterPartition(t *testing.T) {
	c := h.New(t, h.Options{Controllers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), partitionTO)
	defer cancel()
	st := c.Store(t)
	var ids [3]string
	for i, ctl := range c.Controllers {
		ids[i] = ctl.ID(t)
	}
	cut := c.Controllers[cutIdx]
	lb := c.Client(t)
	live := c.ClientOf(t, 1) // a controller on the live side, called directly

	// Steer both runners' connections to c1: the balancer sends nothing new to a server in
	// maintenance. The creates go to each controller directly, which places the sandbox there.
	for _, i := range []int{1, 2} {
		c.LB.SetMaint(t, c.Controllers[i].Name, true)
	}
	tied := createOn(ctx, t, c.ClientOf(t, 0), "tied")
	mover := createOn(ctx, t, c.ClientOf(t, 1), "mover")
	for _, i := range []int{1, 2} {
		c.LB.SetMaint(t, c.Controllers[i].Name, false)
	}
	c.WaitUp(t)
	wss := []api.Workspace{tied, mover}
	for _, ws := range wss {
		if a := allocation(ctx, t, st, ws); a.State != store.AllocConnected || a.Owner != ids[cutIdx] {
			t.Fatalf("%s's allocation is %s, owned by %q; want connected to c1 (%s)", ws.Name, a.State, a.Owner, ids[cutIdx])
		}
	}

	// The old holder's leases, and a write under each that lands.
	old := map[string]uint64{}
	for _, ws := range wss {
		l, err := lb.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "old", TTL: "10m"})
		if err != nil {
			t.Fatalf("lease on %s: %v", ws.Name, err)
		}
		old[ws.ID] = l.Epoch
		writeUnder(ctx, t, lb, ws, l.Epoch, "before.txt", "")
	}

	// The cut. Not c.Cut, which waits for the balancer's checks (seconds, by when c1's lapse
	// is past): the leases move at once, through c2 directly.
	c.Net.Cut(t, cut.Node)
	cutAt := time.Now()
	for _, ws := range wss {
		a := allocation(ctx, t, st, ws)
		t.Logf("%s right after the cut: the store says %s, owned by %s", ws.Name, a.State, controllerName(ids, a.Owner))
	}
	// Released by an operator (its holder is on the far side) and acquired by a new holder.
	// The lease is granted in the store at once; the acquire then pushes the new epoch to the
	// runner through its owner, best effort, and answers only after that push: through c2's
	// tunnel to c1, which nothing answers any more, so the answer waits (see the log) while the
	// test goes on, watching the store.
	type acquired struct {
		lease api.Lease
		took  time.Duration
		err   error
	}
	answers := map[string]chan acquired{}
	for _, ws := range wss {
		if err := live.ReleaseLease(ctx, ws.ID, old[ws.ID]); err != nil {
			t.Fatalf("release the old lease on %s through c2: %v", ws.Name, err)
		}
		ch := make(chan acquired, 1)
		answers[ws.ID] = ch
		go func() {
			start := time.Now()
			l, err := live.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "new", TTL: "10m"})
			ch <- acquired{l, time.Since(start), err}
		}()
	}
	newer := map[string]api.Lease{}
	for _, ws := range wss {
		eventually(t, 20*time.Second, "the new lease on "+ws.Name+" in the store", func() bool {
			l, held, err := st.CurrentLease(ctx, ws.ID)
			if err == nil && held && l.Holder == "new" {
				newer[ws.ID] = l
			}
			return newer[ws.ID].Holder == "new"
		})
		l := newer[ws.ID]
		if l.Epoch <= old[ws.ID] {
			t.Fatalf("the new lease on %s has epoch %d, the old one had %d", ws.Name, l.Epoch, old[ws.ID])
		}
		a := allocation(ctx, t, st, ws)
		t.Logf("%s: new lease at epoch %d (old %d) granted at %s, %s after the cut; the store then named %s its runner's owner (%s)",
			ws.Name, l.Epoch, old[ws.ID], l.AcquiredAt.Format("15:04:05.000"), l.AcquiredAt.Sub(cutAt).Round(time.Millisecond),
			controllerName(ids, a.Owner), a.State)
	}

	// The old holder, on c1's side of the partition, writes under its old epoch through c1.
	// c1 can reach neither the store nor the runner: the write must not land. Bounded, since c1
	// may wait on the store for as long as the client lets it.
	type cliResult struct {
		h.Result
		err error
	}
	sideWrite := make(chan cliResult, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		defer wcancel()
		r, err := c.NodeCLI(wctx, cutIdx, strings.NewReader("stale\n"), "files", "put", tied.ID, "-", "stale-cut.txt",
			"--epoch", fmt.Sprint(old[tied.ID]))
		sideWrite <- cliResult{r, err}
	}()

	// (a) c1 lets go: its log says so, and the store names it owner of nothing connected.
	var lapsed time.Time
	eventually(t, 30*time.Second, "c1 to log that it drops its runners", func() bool {
		lapsed = loggedAt(t, cut, lapseLine)
		return !lapsed.IsZero()
	})
	t.Logf("c1 logged %q %s after the cut (its clock); the new leases were granted before: %v", lapseLine,
		lapsed.Sub(cutAt).Round(time.Millisecond), newer[tied.ID].AcquiredAt.Before(lapsed) && newer[mover.ID].AcquiredAt.Before(lapsed))
	eventually(t, 30*time.Second, "no allocation connected to c1 in the store", func() bool {
		return len(ownedBy(ctx, t, st, ids[cutIdx])) == 0
	}, func() string { return fmt.Sprint(ownedBy(ctx, t, st, ids[cutIdx])) })
	t.Logf("the store names c1 the owner of no connected allocation %s after the cut", time.Since(cutAt).Round(time.Millisecond))
	if r := <-sideWrite; r.err != nil {
		t.Fatal(r.err)
	} else if r.Code == 0 {
		t.Fatalf("a write under the old epoch through the cut-off c1 succeeded: %s", r.Stdout)
	} else {
		t.Logf("the old holder's write through c1 during the cut failed (exit %d, -1: no answer within 15s): %s", r.Code, firstLine(r.Stderr))
	}

	// (c) mover's runner reconnects to a live controller while c1 is still cut off.
	eventually(t, 90*time.Second, "mover's runner to be owned by c2 or c3", func() bool {
		a := allocation(ctx, t, st, mover)
		return a.State == store.AllocConnected && (a.Owner == ids[1] || a.Owner == ids[2])
	})
	t.Logf("mover owned by a live controller again %s after the cut", time.Since(cutAt).Round(time.Millisecond))
	for _, ws := range wss {
		r := <-answers[ws.ID]
		if r.err != nil {
			t.Fatalf("new lease on %s through c2: %v", ws.Name, r.err)
		}
		t.Logf("the acquire of the new lease on %s answered after %s (the epoch push to its runner through c1 waited that long)",
			ws.Name, r.took.Round(time.Millisecond))
	}
	c.LB.WaitState(t, cut.Name, "DOWN") // so the balancer's requests avoid c1
	for range 3 {                       // once round the two live controllers and then some
		execTrue(ctx, t, lb.WithEpoch(newer[mover.ID].Epoch), mover)
	}
	refusedEverywhere(ctx, t, []*client.Client{lb, live, c.ClientOf(t, 2)}, mover, old[mover.ID], "stale-live.txt")
	writeUnder(ctx, t, lb, mover, newer[mover.ID].Epoch, "after-cut.txt", "")
	// tied's runner is cut off with c1, and the cluster says so rather than hang.
	_, err := lb.WithEpoch(newer[tied.ID].Epoch).Exec(ctx, tied.ID, protocol.ExecArgs{Argv: []string{"true"}}, nil, nil, nil)
	if protocol.CodeOf(err) != protocol.CodeUnavailable {
		t.Fatalf("exec on tied while its runner is cut off answered %v; want unavailable", err)
	}

	// Restore: c1 writes heartbeats again and tied's runner reconnects (to any controller).
	restoredAt := time.Now()
	c.Restore(t, cutIdx)
	eventually(t, 30*time.Second, "c1 to write its heartbeat again", func() bool {
		return strings.Contains(cut.RunLog(t), regainLine)
	})
	eventually(t, 60*time.Second, "tied's runner to reconnect", func() bool {
		return allocation(ctx, t, st, tied).State == store.AllocConnected
	})
	a := allocation(ctx, t, st, tied)
	t.Logf("tied's runner connected again %s after the restore, owned by %s", time.Since(restoredAt).Round(time.Millisecond), controllerName(ids, a.Owner))
	all := []*client.Client{lb, c.ClientOf(t, 0), live, c.ClientOf(t, 2)}
	for _, ws := range wss {
		for range 3 { // through the balancer: once on each controller
			execTrue(ctx, t, lb.WithEpoch(newer[ws.ID].Epoch), ws)
		}
		refusedEverywhere(ctx, t, all, ws, old[ws.ID], "stale-after.txt")
		writeUnder(ctx, t, lb, ws, newer[ws.ID].Epoch, "after-restore.txt", "")
		for _, p := range []string{"before.txt", "after-restore.txt"} {
			readBack(ctx, t, lb, ws, p)
		}
		for _, p := range []string{"stale-cut.txt", "stale-live.txt", "stale-after.txt"} {
			if _, err := lb.StatFile(ctx, ws.ID, p); protocol.CodeOf(err) != protocol.CodeNotFound {
				t.Fatalf("%s holds %s, written under a stale epoch (stat: %v)", ws.Name, p, err)
			}
		}
	}
	a = allocation(ctx, t, st, tied)
	if a.State != store.AllocConnected {
		t.Fatalf("tied's allocation is %s after the checks; want connected", a.State)
	}

	// c1 owns runners again: a new runner steered to it is admitted and serves the balancer.
	for _, i := range []int{1, 2} {
		c.LB.SetMaint(t, c.Controllers[i].Name, true)
	}
	again := createOn(ctx, t, live, "again")
	for _, i := range []int{1, 2} {
		c.LB.SetMaint(t, c.Controllers[i].Name, false)
	}
	c.WaitUp(t)
	if a := allocation(ctx, t, st, again); a.State != store.AllocConnected || a.Owner != ids[cutIdx] {
		t.Fatalf("a runner steered to c1 after the restore is %s, owned by %s; want connected to c1", a.State, controllerName(ids, a.Owner))
	}
	for range 3 {
		execTrue(ctx, t, lb, again)
	}
}

// createOn creates a local workspace through cl and requires it ready.
func createOn(ctx context.Context, t *testing.T, cl *client.Client, name string) api.Workspace {
	t.Helper()
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: name, Provider: "local"})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if ws.State != api.StateReady {
		t.Fatalf("created %s in state %s (%s)", name, ws.State, ws.Reason)
	}
	return ws
}

func allocation(ctx context.Context, t *testing.T, st store.Store, ws api.Workspace) store.Allocation {
	t.Helper()
	a, err := st.GetAllocation(ctx, ws.AllocationID)
	if err != nil {
		t.Fatalf("allocation of %s: %v", ws.Name, err)
	}
	return a
}

// ownedBy lists the workspaces whose current allocation the store says is connected to the
// controller id.
func ownedBy(ctx context.Context, t *testing.T, st store.Store, id string) []string {
	t.Helper()
	wss, err := st.ListWorkspaces(ctx, false)
	if err != nil {
		t.Fatalf("list workspaces from the store: %v", err)
	}
	var out []string
	for _, ws := range wss {
		if ws.AllocationID == "" {
			continue
		}
		if a := allocation(ctx, t, st, ws); a.State == store.AllocConnected && a.Owner == id {
			out = append(out, ws.Name)
		}
	}
	return out
}

// writeUnder writes path under epoch through cl; want "" requires success, otherwise the code
// the write must fail with.
func writeUnder(ctx context.Context, t *testing.T, cl *client.Client, ws api.Workspace, epoch uint64, path string, want protocol.Code) {
	t.Helper()
	_, err := cl.WithEpoch(epoch).WriteFile(ctx, ws.ID, path, strings.NewReader(path+"\n"), client.WriteOptions{})
	switch {
	case want == "" && err != nil:
		t.Fatalf("write %s to %s under epoch %d through %s: %v", path, ws.Name, epoch, cl.Addr(), err)
	case want != "" && protocol.CodeOf(err) != want:
		t.Fatalf("write %s to %s under epoch %d through %s answered %v; want %s", path, ws.Name, epoch, cl.Addr(), err, want)
	}
}

// refusedEverywhere writes under a stale epoch through each client: every one must refuse.
func refusedEverywhere(ctx context.Context, t *testing.T, cls []*client.Client, ws api.Workspace, epoch uint64, path string) {
	t.Helper()
	for _, cl := range cls {
		writeUnder(ctx, t, cl, ws, epoch, path, protocol.CodeStaleEpoch)
	}
}

func execTrue(ctx context.Context, t *testing.T, cl *client.Client, ws api.Workspace) {
	t.Helper()
	mustExec(ctx, t, cl, ws, "true")
}

// mustExec runs argv in ws through cl and requires exit status 0.
func mustExec(ctx context.Context, t *testing.T, cl *client.Client, ws api.Workspace, argv ...string) {
	t.Helper()
	var stderr bytes.Buffer
	exit, err := cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: argv}, nil, nil, &stderr)
	if err != nil {
		t.Fatalf("exec %q on %s through %s: %v", argv, ws.Name, cl.Addr(), err)
	}
	if exit.Status() != 0 {
		t.Fatalf("%q on %s exited %d: %s", argv, ws.Name, exit.Status(), stderr.String())
	}
}

func readBack(ctx context.Context, t *testing.T, cl *client.Client, ws api.Workspace, path string) {
	t.Helper()
	var got bytes.Buffer
	if _, err := cl.ReadFile(ctx, ws.ID, path, &got, client.ReadOptions{}); err != nil {
		t.Fatalf("read %s of %s: %v", path, ws.Name, err)
	}
	if got.String() != path+"\n" {
		t.Fatalf("%s of %s holds %q", path, ws.Name, got.String())
	}
}

// controllerName is c1, c2 or c3 for a controller's id.
func controllerName(ids [3]string, id string) string {
	for i, x := range ids {
		if x == id {
			return fmt.Sprintf("c%d", i+1)
		}
	}
	return fmt.Sprintf("%q", id)
}

// loggedAt is the time of the first line of ctl's current run holding msg, by its own clock
// (zero if none yet).
func loggedAt(t *testing.T, ctl *h.Controller, msg string) time.Time {
	t.Helper()
	for line := range strings.Lines(ctl.RunLog(t)) {
		if !strings.Contains(line, msg) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			t.Fatalf("controller %s logged %q without a time: %v", ctl.Name, line, err)
		}
		return at
	}
	return time.Time{}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
