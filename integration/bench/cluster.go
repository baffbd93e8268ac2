package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/controller/store"
	"github.com/tetherhq/tether/controller/store/sqlstore/pgtest"
	h "github.com/tetherhq/tether/integration/clusterharness"
	"github.com/tetherhq/tether/protocol"
)

// clusterFile is the workspace file the cluster rows get.
const clusterFile = "cluster-file.bin"

// clusterRoute is one way of calling a workspace's runner, and what it measured.
type clusterRoute struct {
	what string // how the request travels, for the table
	cl   *client.Client
	ws   api.Workspace

	execs []time.Duration
	gets  []float64 // MiB/s
}

// execChunk is how many exec round trips one route makes before the next route's turn.
const execChunk = 10

// cluster measures what a cluster costs a request: exec `true` and a file get through HAProxy
// with one and with three controllers, and with three also on the runner's owner and on
// another controller directly (the latter tunnels to the owner), each against one controller
// called directly with its runner connected to it directly (no balancer anywhere); and how
// long a runner is owned by no live controller after its owner is killed.
//
// The three clusters run at once and the routes take turns (execChunk round trips, or one get,
// each), so that load on a shared machine that comes and goes weighs on all of them alike
// rather than on whichever ran then.
func (b *bench) cluster(ctx context.Context) error {
	h.BinDir = b.cfg.binDir
	// The PostgreSQL server the harness started (a throwaway one, unless
	// TETHER_TEST_POSTGRES_URL names one) is this process's to stop.
	defer pgtest.Stop()
	data := make([]byte, b.cfg.clusterFileSize)
	var seed [32]byte
	seed[0] = 'c'
	_, _ = rand.NewChaCha8(seed).Read(data)
	sum := sha256.Sum256(data)
	file := hostFile{size: int64(len(data)), sha: hex.EncodeToString(sum[:])}

	skipped, err := runPhase("cluster", func(t testing.TB) {
		progress("cluster: starting 1 controller with its runners direct, 1 behind HAProxy, 3 behind HAProxy")
		direct := h.New(t, h.Options{Controllers: 1, RunnersDirect: true})
		one := h.New(t, h.Options{Controllers: 1})
		three := h.New(t, h.Options{Controllers: 3})
		wsDirect := b.clusterWorkspace(ctx, t, direct, data)
		wsOne := b.clusterWorkspace(ctx, t, one, data)
		ws := b.clusterWorkspace(ctx, t, three, data)
		owner := ownerIndex(ctx, t, three, ws)
		routes := []*clusterRoute{
			{what: "1 controller called directly, runner connected to it directly", cl: direct.ClientOf(t, 0), ws: wsDirect},
			{what: "1 controller behind HAProxy, runner connected through it; requests through HAProxy", cl: one.Client(t), ws: wsOne},
			{what: "3 controllers, runner connected through HAProxy; requests through HAProxy (round robin: a third land on the runner's owner, the rest tunnel to it)", cl: three.Client(t), ws: ws},
			{what: "3 controllers, runner connected through HAProxy; requests to the runner's owner directly", cl: three.ClientOf(t, owner), ws: ws},
			{what: "3 controllers, runner connected through HAProxy; requests to another controller directly (tunnelled to the owner)", cl: three.ClientOf(t, (owner+1)%3), ws: ws},
		}
		b.clusterMeasure(ctx, t, routes, file)
		for _, r := range routes[1:] {
			b.clusterRow(routes[0], r)
		}
		b.failover(ctx, t, three, ws)
	})
	if skipped != "" {
		b.rep.note("Cluster rows are n/a: %s", skipped)
		return nil
	}
	if err != nil {
		return err
	}
	b.rep.note("Cluster rows: controllers each in a network namespace of their own on a veth bridge, sharing one PostgreSQL (a throwaway server with fsync off) and one MinIO on this host; HAProxy in HTTP mode balances every request round robin. The reference is one such controller called at its own address, its runner connected to it directly: the ratio is what the balancer and the tunnel add. The routes take turns (%d round trips or one get each), so passing load weighs on all alike. Failover polls every 10 ms.", execChunk)
	return nil
}

// clusterWorkspace creates a local workspace through the balancer (or the only controller),
// waits for it, and puts the file the gets read.
func (b *bench) clusterWorkspace(ctx context.Context, t testing.TB, c *h.Cluster, data []byte) api.Workspace {
	cl := c.Client(t)
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: "bench-cluster", Provider: "local"})
	if err != nil {
		t.Fatalf("create a workspace: %v", err)
	}
	if ws.State != api.StateReady {
		t.Fatalf("workspace %s is %s: %s", ws.ID, ws.State, ws.Reason)
	}
	if _, err := cl.WriteFile(ctx, ws.ID, clusterFile, bytes.NewReader(data), client.WriteOptions{}); err != nil {
		t.Fatalf("put %s: %v", clusterFile, err)
	}
	return ws
}

// clusterMeasure times cfg.n exec `true` round trips and cfg.rounds file gets on every route,
// the routes taking turns, after an untimed warm-up of each (which opens its connections: a
// tunnel, on another controller).
func (b *bench) clusterMeasure(ctx context.Context, t testing.TB, routes []*clusterRoute, file hostFile) {
	execOnce := func(r *clusterRoute) error {
		var stderr bytes.Buffer
		exit, err := r.cl.Exec(ctx, r.ws.ID, protocol.ExecArgs{Argv: []string{"true"}}, nil, io.Discard, &stderr)
		if err == nil && exit.Status() != 0 {
			err = fmt.Errorf("true exited %d: %s", exit.Status(), stderr.String())
		}
		return err
	}
	get := func(r *clusterRoute) (time.Duration, error) {
		w := newHashCounter()
		start := time.Now()
		if _, err := r.cl.ReadFile(ctx, r.ws.ID, clusterFile, w, client.ReadOptions{}); err != nil {
			return 0, err
		}
		took := time.Since(start)
		if w.n != file.size || w.sum() != file.sha {
			return 0, fmt.Errorf("got %d bytes (sha256 %s); want %d (%s)", w.n, w.sum(), file.size, file.sha)
		}
		return took, nil
	}
	for _, r := range routes {
		if _, err := sample(ctx, 0, 5, func() error { return execOnce(r) }); err != nil {
			t.Fatalf("exec (%s): %v", r.what, err)
		}
		if _, err := get(r); err != nil {
			t.Fatalf("get (%s): %v", r.what, err)
		}
	}
	progress("cluster: %d × exec `true` on each of %d routes, in turns of %d", b.cfg.n, len(routes), execChunk)
	for left := b.cfg.n; left > 0; left -= execChunk {
		for _, r := range routes {
			s, err := sample(ctx, min(left, execChunk), 0, func() error { return execOnce(r) })
			if err != nil {
				t.Fatalf("exec (%s): %v", r.what, err)
			}
			r.execs = append(r.execs, s...)
		}
	}
	progress("cluster: %d × get %d MiB on each of %d routes, in turns", b.cfg.rounds, file.size>>20, len(routes))
	for range b.cfg.rounds {
		for _, r := range routes {
			took, err := get(r)
			if err != nil {
				t.Fatalf("get (%s): %v", r.what, err)
			}
			r.gets = append(r.gets, float64(file.size)/(1<<20)/took.Seconds())
		}
	}
}

// clusterRow reports a route against the reference route.
func (b *bench) clusterRow(ref, r *clusterRoute) {
	e, re := summarize(r.execs), summarize(ref.execs)
	b.rep.add(result{Metric: fmt.Sprintf("cluster: exec `true` round trip p50 of %d", e.N), Unit: unitMS, N: e.N, RefN: re.N,
		Tether: val(ms(e.P50)), TetherTool: r.what, Reference: val(ms(re.P50)), ReferenceTool: ref.what})
	b.rep.add(result{Metric: fmt.Sprintf("cluster: exec `true` round trip p90 of %d", e.N), Unit: unitMS, N: e.N, RefN: re.N,
		Tether: val(ms(e.P90)), TetherTool: r.what, Reference: val(ms(re.P90)), ReferenceTool: ref.what})
	b.rep.add(result{Metric: fmt.Sprintf("cluster: %d MiB file get, SHA-256 checked, median of %d", b.cfg.clusterFileSize>>20, len(r.gets)),
		Unit: unitMiBps, N: len(r.gets), RefN: len(ref.gets), Tether: val(median(r.gets)), TetherTool: r.what,
		Reference: val(median(ref.gets)), ReferenceTool: ref.what})
}

// ownerIndex is the index of the controller the store names the owner of ws's runner.
func ownerIndex(ctx context.Context, t testing.TB, c *h.Cluster, ws api.Workspace) int {
	a, err := c.Store(t).GetAllocation(ctx, ws.AllocationID)
	if err != nil {
		t.Fatalf("allocation of %s: %v", ws.ID, err)
	}
	for i, ctl := range c.Controllers {
		if ctl.ID(t) == a.Owner && a.State == store.AllocConnected {
			return i
		}
	}
	t.Fatalf("the runner of %s is %s, owned by %q: no controller of the cluster", ws.ID, a.State, a.Owner)
	return -1
}

// failover kills the runner's owner with SIGKILL cfg.failovers times and times how long until
// the store names a live controller the owner again, and until an exec through the balancer
// answers again; the killed controller is restarted (untimed) before the next round.
func (b *bench) failover(ctx context.Context, t testing.TB, c *h.Cluster, ws api.Workspace) {
	st, lb := c.Store(t), c.Client(t)
	var owned, answers []time.Duration
	for i := range b.cfg.failovers {
		victim := ownerIndex(ctx, t, c, ws)
		killed := c.Controllers[victim].ID(t)
		progress("cluster failover %d of %d: kill -9 %s, the runner's owner", i+1, b.cfg.failovers, c.Controllers[victim].Name)
		c.Controllers[victim].Kill(t)
		start := time.Now()
		var ownedAt, answeredAt time.Duration
		deadline := start.Add(time.Minute)
		for ownedAt == 0 || answeredAt == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("failover %d: the runner was not owned and usable again within a minute (owned after %s, answered after %s)", i+1, ownedAt, answeredAt)
			}
			if ownedAt == 0 {
				a, err := st.GetAllocation(ctx, ws.AllocationID)
				if err == nil && a.State == store.AllocConnected && a.Owner != killed {
					ownedAt = time.Since(start)
				}
			}
			if answeredAt == 0 {
				// Fails fast while nobody holds the runner (unavailable), so this is a poll.
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				exit, err := lb.Exec(actx, ws.ID, protocol.ExecArgs{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
				cancel()
				if err == nil && exit.Status() == 0 {
					answeredAt = time.Since(start)
				}
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		owned, answers = append(owned, ownedAt), append(answers, answeredAt)
		progress("cluster failover %d: owned again after %s, exec answered after %s", i+1, ownedAt.Round(time.Millisecond), answeredAt.Round(time.Millisecond))
		c.Controllers[victim].Start(t)
		c.WaitUp(t)
	}
	ttl := val(3000) // peer.DefaultTiming.TTL: the bound the design promises
	o, a := summarize(owned), summarize(answers)
	b.rep.add(result{Metric: fmt.Sprintf("cluster failover: kill -9 of the runner's owner → owned by a live controller again (store), p50 of %d", o.N),
		Unit: unitMS, N: o.N, Tether: val(ms(o.P50)), TetherTool: fmt.Sprintf("3 controllers; min %s, max %s", o.Min.Round(time.Millisecond), o.Max.Round(time.Millisecond)),
		Reference: ttl, ReferenceTool: "the heartbeat TTL (3 s) a dead owner's runner waits out before another controller takes it"})
	b.rep.add(result{Metric: fmt.Sprintf("cluster failover: kill -9 of the runner's owner → exec `true` through HAProxy answers again, p50 of %d", a.N),
		Unit: unitMS, N: a.N, Tether: val(ms(a.P50)), TetherTool: fmt.Sprintf("3 controllers; min %s, max %s", a.Min.Round(time.Millisecond), a.Max.Round(time.Millisecond)),
		Reference: ttl, ReferenceTool: "the heartbeat TTL (3 s)"})
}
