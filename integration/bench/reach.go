package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/integration/devserver/pattern"
	"github.com/tetherhq/tether/protocol"
)

const (
	// reachGets is how many small GETs each way in is timed with, one after another on one
	// kept-alive connection (after reachWarm untimed ones).
	reachGets = 1000
	reachWarm = 50
	// reachConc is how many clients send small GETs at once for the requests/s rows, each
	// reachConcEach of them.
	reachConc     = 8
	reachConcEach = 250
	// reachMiB is the size of the large GET.
	reachMiB = 256
	// reachService is the bench's devserver service.
	reachService = "reach-web"
)

// unitRPS is requests per second (higher is better).
const unitRPS = "req/s"

// reachWay is one way to the devserver: its base URL and what each request carries.
type reachWay struct {
	name   string // what the table calls it
	base   string // URL the paths are appended to
	header http.Header
}

// reachFigures are one way's measurements.
type reachFigures struct {
	lat  durStats
	rps  float64
	mibs float64
}

// reach measures issue 19's rows: small GETs (latency, requests/s) and a 256 MiB GET (MiB/s) of
// the devserver in a local workspace, through the controller's HTTP proxy and through
// `tether port-forward`, beside the same server reached directly on the host's loopback (a
// local sandbox shares it), all in this one run.
func (b *bench) reach(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "tether-bench-reach-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	progress("reach: building the devserver and starting it as service %s", reachService)
	bin := filepath.Join(dir, "devserver")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/tetherhq/tether/integration/devserver")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build devserver: %v: %s", err, out)
	}
	if err := b.t.cli(ctx, io.Discard, "files", "put", b.ws.ID, bin, "devserver", "--mode", "0755"); err != nil {
		return err
	}
	var out bytes.Buffer
	if err := b.t.cli(ctx, &out, "service", "start", b.ws.ID, reachService, "--port", "auto", "--ready", "http:/health", "--json", "--", "./devserver"); err != nil {
		return err
	}
	var svc api.Service
	if err := json.Unmarshal(out.Bytes(), &svc); err != nil || svc.Port == 0 {
		return fmt.Errorf("service start printed %q: %v", out.String(), err)
	}
	defer func() { _ = b.t.cli(context.WithoutCancel(ctx), io.Discard, "service", "stop", b.ws.ID, reachService) }()

	pf, err := startPortForward(ctx, b.t, b.ws.ID, svc.Port)
	if err != nil {
		return err
	}
	defer pf.stop()

	direct := reachWay{name: "direct", base: fmt.Sprintf("http://127.0.0.1:%d", svc.Port)}
	ref, err := measureReach(ctx, direct, b.cfg.rounds)
	if err != nil {
		return fmt.Errorf("reach directly: %w", err)
	}
	refTool := "the same devserver reached directly on the host's loopback (127.0.0.1:PORT; a local sandbox shares it)"
	ways := []struct {
		way  reachWay
		tool string
	}{
		{reachWay{name: "proxy", base: fmt.Sprintf("%s/v1/workspaces/%s/services/%s/proxy", b.t.addr, b.ws.ID, reachService),
			header: http.Header{"Authorization": {protocol.Bearer(b.t.token)}}},
			"the controller's HTTP proxy (/v1/workspaces/WS/services/NAME/proxy/, operator token)"},
		{reachWay{name: "port-forward", base: "http://" + pf.addr}, "`tether port-forward WS 0:PORT` (a CLI process, one upgraded connection per client connection)"},
	}
	for _, w := range ways {
		fig, err := measureReach(ctx, w.way, b.cfg.rounds)
		if err != nil {
			// A way that does not work yet leaves its rows n/a rather than the whole bench failed.
			progress("reach through %s: %v", w.way.name, err)
			b.rep.note("reach through %s failed: %v", w.way.name, err)
			fig = nil
		}
		b.addReach(w.tool, fig, ref, refTool)
	}
	b.rep.note("Reach rows: the devserver (integration/devserver) runs as a service of a local workspace; small GETs are /health, %d timed one after another on one kept-alive connection (%d untimed first), and %d clients × %d at once for requests/s; the large GET is /bytes of %d MiB, counted and hashed as it streams, median of %d rounds.",
		reachGets, reachWarm, reachConc, reachConcEach, reachMiB, b.cfg.rounds)
	return nil
}

// addReach adds one way's rows beside the direct reference.
func (b *bench) addReach(tool string, fig *reachFigures, ref *reachFigures, refTool string) {
	pick := func(f *reachFigures, get func(*reachFigures) float64) *float64 {
		if f == nil {
			return nil
		}
		return val(get(f))
	}
	note := ""
	if fig == nil {
		note = "failed, see notes"
	}
	for _, r := range []result{
		{Metric: fmt.Sprintf("small GET p50 of %d", reachGets), Unit: unitMS, N: reachGets,
			Tether: pick(fig, func(f *reachFigures) float64 { return ms(f.lat.P50) }), Reference: val(ms(ref.lat.P50))},
		{Metric: fmt.Sprintf("small GET p99 of %d", reachGets), Unit: unitMS, N: reachGets,
			Tether: pick(fig, func(f *reachFigures) float64 { return ms(f.lat.P99) }), Reference: val(ms(ref.lat.P99))},
		{Metric: fmt.Sprintf("small GETs, %d clients at once", reachConc), Unit: unitRPS, Better: "higher", N: reachConc * reachConcEach,
			Tether: pick(fig, func(f *reachFigures) float64 { return f.rps }), Reference: val(ref.rps)},
		{Metric: fmt.Sprintf("%d MiB GET", reachMiB), Unit: unitMiBps, N: b.cfg.rounds,
			Tether: pick(fig, func(f *reachFigures) float64 { return f.mibs }), Reference: val(ref.mibs)},
	} {
		r.TetherTool, r.ReferenceTool, r.RefN, r.Note = tool, refTool, r.N, note
		b.rep.add(r)
	}
}

// measureReach times small GETs and the large GET through one way.
func measureReach(ctx context.Context, w reachWay, nRounds int) (*reachFigures, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: reachConc, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	get := func(path string, body io.Writer) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+path, nil)
		if err != nil {
			return err
		}
		for k, v := range w.header {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
		}
		_, err = io.Copy(body, resp.Body)
		return err
	}
	health := func() error {
		var out bytes.Buffer
		if err := get("/health", &out); err != nil {
			return err
		}
		if out.String() != "ok\n" {
			return fmt.Errorf("/health answered %q", out.String())
		}
		return nil
	}
	progress("reach %s: %d small GETs one after another", w.name, reachGets)
	lat, err := sample(ctx, reachGets, reachWarm, health)
	if err != nil {
		return nil, err
	}
	f := &reachFigures{lat: summarize(lat)}

	progress("reach %s: %d clients × %d small GETs", w.name, reachConc, reachConcEach)
	var wg sync.WaitGroup
	errs := make(chan error, reachConc)
	start := time.Now()
	for range reachConc {
		wg.Go(func() {
			for range reachConcEach {
				if err := health(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	f.rps = float64(reachConc*reachConcEach) / time.Since(start).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}

	size := int64(reachMiB << 20)
	want := pattern.SHA256(size)
	progress("reach %s: %d × GET /bytes of %d MiB", w.name, nRounds, reachMiB)
	rounds, err := throughput(ctx, nRounds, size, want, func(out io.Writer) error {
		return get(fmt.Sprintf("/bytes?n=%d", size), out)
	})
	if err != nil {
		return nil, err
	}
	f.mibs = median(rounds)
	return f, nil
}

// pfProcess is a running `tether port-forward`.
type pfProcess struct {
	cmd  *exec.Cmd
	addr string // the local address it forwards from
	done chan struct{}
}

var forwardingFrom = regexp.MustCompile(`^Forwarding from (\S+) -> \d+$`)

// startPortForward runs `tether port-forward WS 0:PORT` and waits for its forwarding line.
func startPortForward(ctx context.Context, t *tetherEnv, ws string, port int) (*pfProcess, error) {
	cmd := exec.Command(filepath.Join(t.binDir, "tether"), "port-forward", ws, fmt.Sprintf("0:%d", port))
	cmd.Env = append(cleanEnv(), "TETHER_ADDR="+t.addr, "TETHER_TOKEN="+t.token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer // read once the process ended
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &pfProcess{cmd: cmd, done: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwardingFrom.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case p.addr = <-found:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("tether port-forward exited before forwarding: %s", stderr.String())
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.stop()
	return nil, errors.Join(errors.New("tether port-forward printed no forwarding line within 30s"), ctx.Err())
}

// stop ends the command as Ctrl-C would.
func (p *pfProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
