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
	h "github.com/tetherhq/tether/integration/clusterharness"
	"github.com/tetherhq/tether/protocol"
)

// loopOps are the operations of one round, in order. A failed operation skips the rest of its
// round but the removal, so a round's failure shows where it broke and leaves nothing running.
var loopOps = []string{"shift", "create", "exec", "files put", "files get", "snapshot", "close", "reopen",
	"lease acquire", "epoch write", "stale write refused", "rm"}

// opTimeout bounds one operation: a hung request fails its round instead of the test.
const opTimeout = 2 * time.Minute

// TestClusterThreeControllers: three controllers behind round-robin HAProxy, 200 rounds of a
// workspace's whole life through the balancer. Each request, and each runner's connection,
// reaches any controller: the runner's owner serves it, others reach it through a tunnel.
func TestClusterThreeControllers(t *testing.T) {
	c := h.New(t, h.Options{Controllers: 3, ServeArgs: []string{"--ready-timeout", "20s"}})
	l := &loop{t: t, c: c, cl: c.Client(t), stats: map[string]*opStats{}}
	const rounds = 200
	run := 0
	for ; run < rounds; run++ {
		// Stop while there is time left to report and clean up, rather than be killed.
		if d, ok := t.Deadline(); ok && time.Until(d) < 3*opTimeout {
			break
		}
		l.round(run)
	}
	failed := false
	t.Logf("%d of %d rounds run, through %s (%s mode)", run, rounds, c.LB.LocalURL, h.ModeHTTP)
	for _, op := range loopOps {
		s := l.stats[op]
		if s == nil {
			s = &opStats{}
		}
		t.Logf("  %-20s ok %3d  failed %3d  skipped %3d", op, s.ok, s.failed, s.skipped)
		for _, e := range s.errs {
			t.Logf("      %s", e)
		}
		failed = failed || s.failed > 0
	}
	if run < rounds {
		t.Errorf("only %d of %d rounds ran before the test's deadline", run, rounds)
	}
	if failed {
		t.Errorf("operations failed through the balancer (counts above)")
	}
}

type loop struct {
	t     *testing.T
	c     *h.Cluster
	cl    *client.Client
	stats map[string]*opStats
}

type opStats struct {
	ok, failed, skipped int
	errs                []string // the first few failures
}

func (l *loop) stat(op string) *opStats {
	if l.stats[op] == nil {
		l.stats[op] = &opStats{}
	}
	return l.stats[op]
}

// step runs op unless an earlier step of the round failed, and counts how it went.
func (l *loop) step(round int, broken *bool, op string, fn func(ctx context.Context) error) {
	s := l.stat(op)
	if *broken {
		s.skipped++
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	start := time.Now()
	if err := fn(ctx); err != nil {
		*broken = true
		s.failed++
		if len(s.errs) < 3 {
			s.errs = append(s.errs, fmt.Sprintf("round %d: %v", round, err))
		}
		// As it happens, so a long run shows its progress.
		l.t.Logf("round %d: %s failed after %s: %v", round, op, time.Since(start).Round(time.Millisecond), err)
		return
	}
	s.ok++
}

// round is one workspace's life: create, exec with stdin and stdout, a file in and out, a
// snapshot, close, reopen (the file restored), the writer lease and a write under its epoch
// (and one under an older epoch refused), removal.
func (l *loop) round(n int) {
	var broken bool
	var ws api.Workspace
	// Round robin hands a fixed sequence of requests to the controllers in a fixed pattern
	// (without routing, every create reached c1 and every runner c2): a few requests first
	// shift each round's pattern, so every operation meets every controller.
	l.step(n, &broken, "shift", func(ctx context.Context) error {
		for range n % len(l.c.Controllers) {
			if _, err := l.cl.ListWorkspaces(ctx, false); err != nil {
				return err
			}
		}
		return nil
	})
	data := bytes.Repeat([]byte(fmt.Sprintf("round %d\n", n)), 8192)
	l.step(n, &broken, "create", func(ctx context.Context) (err error) {
		ws, err = l.cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: fmt.Sprintf("loop-%d", n), Provider: "local"})
		if err == nil && ws.State != api.StateReady {
			err = fmt.Errorf("created %s in state %s (%s)", ws.ID, ws.State, ws.Reason)
		}
		return err
	})
	l.step(n, &broken, "exec", func(ctx context.Context) error {
		in := fmt.Sprintf("stdin of round %d\n", n)
		var out string
		if n%2 == 1 { // every other round through the CLI: a new process, new connections
			r := l.c.CLI(l.t, strings.NewReader(in), "exec", ws.ID, "--", "cat")
			if r.Code != 0 {
				return fmt.Errorf("tether exec: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
			}
			out = r.Stdout
		} else {
			var stdout, stderr bytes.Buffer
			exit, err := l.cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"cat"}}, strings.NewReader(in), &stdout, &stderr)
			if err != nil {
				return err
			}
			if exit.Status() != 0 {
				return fmt.Errorf("cat exited %d: %s", exit.Status(), stderr.String())
			}
			out = stdout.String()
		}
		if out != in {
			return fmt.Errorf("cat printed %q; want %q", out, in)
		}
		return nil
	})
	l.step(n, &broken, "files put", func(ctx context.Context) error {
		_, err := l.cl.WriteFile(ctx, ws.ID, "data.txt", bytes.NewReader(data), client.WriteOptions{SHA256: sha256Hex(data)})
		return err
	})
	l.step(n, &broken, "files get", func(ctx context.Context) error { return l.readBack(ctx, ws.ID, data) })
	l.step(n, &broken, "snapshot", func(ctx context.Context) error {
		snap, err := l.cl.CreateSnapshot(ctx, ws.ID)
		if err == nil && snap.Bytes == 0 {
			err = fmt.Errorf("snapshot %s is empty", snap.ID)
		}
		return err
	})
	l.step(n, &broken, "close", func(ctx context.Context) error {
		var res api.CloseResult
		if err := l.cl.CloseWorkspace(ctx, ws.ID, api.CloseRequest{}, &res); err != nil {
			return err
		}
		if res.Workspace.State != api.StateClosed {
			return fmt.Errorf("close left the workspace %s", res.Workspace.State)
		}
		return nil
	})
	l.step(n, &broken, "reopen", func(ctx context.Context) error {
		re, err := l.cl.ReopenWorkspace(ctx, ws.ID, api.ReopenRequest{})
		if err != nil {
			return err
		}
		if re.State != api.StateReady {
			return fmt.Errorf("reopened into state %s (%s)", re.State, re.Reason)
		}
		return l.readBack(ctx, ws.ID, data)
	})
	var lease api.Lease
	l.step(n, &broken, "lease acquire", func(ctx context.Context) (err error) {
		lease, err = l.cl.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "loop", TTL: "5m"})
		return err
	})
	l.step(n, &broken, "epoch write", func(ctx context.Context) error {
		_, err := l.cl.WithEpoch(lease.Epoch).WriteFile(ctx, ws.ID, "leased.txt", strings.NewReader("under the lease\n"), client.WriteOptions{})
		return err
	})
	l.step(n, &broken, "stale write refused", func(ctx context.Context) error {
		_, err := l.cl.WithEpoch(lease.Epoch-1).WriteFile(ctx, ws.ID, "stale.txt", strings.NewReader("stale\n"), client.WriteOptions{})
		if code := protocol.CodeOf(err); code != protocol.CodeStaleEpoch {
			return fmt.Errorf("a write under epoch %d (the lease's is %d) answered %v; want stale_epoch", lease.Epoch-1, lease.Epoch, err)
		}
		return nil
	})
	if ws.ID == "" {
		l.stat("rm").skipped++
		return
	}
	broken = false // whatever failed, the workspace goes
	l.step(n, &broken, "rm", func(ctx context.Context) error {
		_, err := l.cl.DeleteWorkspace(ctx, ws.ID)
		return err
	})
}

func (l *loop) readBack(ctx context.Context, id string, want []byte) error {
	var got bytes.Buffer
	if _, err := l.cl.ReadFile(ctx, id, "data.txt", &got, client.ReadOptions{}); err != nil {
		return err
	}
	if !bytes.Equal(got.Bytes(), want) {
		return fmt.Errorf("data.txt holds %d bytes, not the %d written", got.Len(), len(want))
	}
	return nil
}
