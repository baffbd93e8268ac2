package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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
var loopOps = []string{"shift", "create", "exec", "files put", "files get", "service", "artifact install", "snapshot",
	"snapshot restore", "close", "reopen",
	"lease acquire", "epoch write", "stale write refused", "rm"}

// opTimeout bounds one operation: a hung request fails its round instead of the test.
const opTimeout = 2 * time.Minute

// TestClusterThreeControllers: three controllers behind round-robin HAProxy, 200 rounds of a
// workspace's whole life through the balancer. Each request, and each runner's connection,
// reaches any controller: the runner's owner serves it, others reach it through a tunnel.
func TestClusterThreeControllers(t *testing.T) {
	needRunnerImage(t)
	c := h.New(t, h.Options{Controllers: 3, ServeArgs: []string{"--ready-timeout", "20s"}})
	l := &loop{t: t, c: c, cl: c.Client(t), stats: map[string]*opStats{}}
	rounds := 200
	if v, err := strconv.Atoi(os.Getenv("TETHER_CLUSTER_ROUNDS")); err == nil && v > 0 {
		rounds = v // a shorter run while working on the cluster
	}
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

// errSkip is what a step returns when it does not apply to the round's workspace.
var errSkip = errors.New("not for this workspace")

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
	err := fn(ctx)
	if errors.Is(err, errSkip) {
		s.skipped++
		return
	}
	if err != nil {
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
	// Round robin hands a fixed sequence of requests to the controllers in a fixed pattern: a
	// few requests first shift each round's, so every operation meets every controller. (Not
	// the runner's connection: it is always the request after its create, so it always reaches
	// the next controller — creation itself needs the cluster's routing.)
	l.step(n, &broken, "shift", func(ctx context.Context) error {
		for range n % len(l.c.Controllers) {
			if _, err := l.cl.ListWorkspaces(ctx, false); err != nil {
				return err
			}
		}
		return nil
	})
	data := bytes.Repeat([]byte(fmt.Sprintf("round %d\n", n)), 8192)
	// Every fourth workspace is a Docker container (on its own network, its runner dials the
	// socket of the controller that made it; any controller reaches it through a tunnel).
	provider := "local"
	if n%4 == 3 {
		provider = "docker"
	}
	l.step(n, &broken, "create", func(ctx context.Context) (err error) {
		ws, err = l.cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: fmt.Sprintf("loop-%d", n), Provider: provider})
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
	l.step(n, &broken, "service", func(ctx context.Context) error {
		if provider != "local" {
			// The service is a perl one-liner, which a container from scratch does not have.
			return errSkip
		}
		// A local sandbox's service answers on its host's loopback: the controller that placed
		// it answers the endpoint (its direct address), whichever controller the request reached.
		name := fmt.Sprintf("web%d", n)
		svc, err := l.cl.StartService(ctx, ws.ID, protocol.ServiceSpec{Name: name, Ready: "tcp",
			Argv: []string{"perl", "-MIO::Socket::INET", "-e", tcpServer}})
		if err != nil {
			return err
		}
		if svc.State != protocol.ServiceReady {
			return fmt.Errorf("service %s is %s", name, svc.State)
		}
		ep, err := l.cl.ServiceEndpoint(ctx, ws.ID, name)
		if err == nil && (ep.Port != svc.Port || !strings.HasSuffix(ep.URL, "/services/"+name+"/proxy/")) {
			err = fmt.Errorf("endpoint %+v; want the proxy URL of port %d", ep, svc.Port)
		}
		if err != nil {
			return err
		}
		_, err = l.cl.StopService(ctx, ws.ID, name)
		return err
	})
	l.step(n, &broken, "artifact install", func(ctx context.Context) error {
		// The agent's download goes from its runner to the controller that holds it (any of
		// them), which serves the artifact from the shared bucket.
		a, err := l.cl.PutArtifact(ctx, ws.ID, "art.bin", bytes.NewReader(data))
		if err != nil {
			return err
		}
		var out bytes.Buffer
		exit, err := l.cl.Exec(ctx, ws.ID, protocol.ExecArgs{Argv: []string{"sh", "-c",
			"tether-runner artifact download " + a.ID + " art.bin >/dev/null && sha256sum art.bin | cut -c1-64"}}, nil, &out, &out)
		if err != nil {
			return err
		}
		if exit.Status() != 0 || strings.TrimSpace(out.String()) != sha256Hex(data) {
			return fmt.Errorf("artifact download exited %d: %q", exit.Status(), out.String())
		}
		return nil
	})
	var snap api.Snapshot
	l.step(n, &broken, "snapshot", func(ctx context.Context) (err error) {
		snap, err = l.cl.CreateSnapshot(ctx, ws.ID)
		if err == nil && snap.Bytes == 0 {
			err = fmt.Errorf("snapshot %s is empty", snap.ID)
		}
		return err
	})
	if n%5 == 0 {
		l.step(n, &broken, "snapshot restore", func(ctx context.Context) error {
			res, err := l.cl.RestoreSnapshot(ctx, snap.ID, api.RestoreRequest{Name: fmt.Sprintf("loop-%d-restored", n), Provider: provider})
			if err != nil {
				return err
			}
			err = l.readBack(ctx, res.Workspace.ID, data)
			if _, rerr := l.cl.DeleteWorkspace(ctx, res.Workspace.ID); err == nil {
				err = rerr
			}
			return err
		})
	}
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

// tcpServer is a web service in Perl (perl-base is on every Debian host, and a local sandbox runs
// the host's programs): on $PORT it answers every request 200 "ok".
const tcpServer = `my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ENV{PORT}, Listen => 16, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) { while (my $l = <$c>) { last if $l =~ /^\r?$/ } print $c "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n"; close $c }`

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
