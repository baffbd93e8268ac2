package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
)

// The failover tests keep a fleet of workspaces busy through the balancer while they kill or
// restart controllers, and record every operation: when it started and ended and how it went,
// so that a failure can be told apart by when it happened (in flight at a kill, during the
// takeover, after it).

// fleetWS is one workspace of the fleet. It holds data.txt, and a writer lease (holder "loop")
// whose epoch the loop's commands run under; Stale is an older epoch, released before the
// lease was taken, under which no write may ever be accepted.
type fleetWS struct {
	ID, Alloc    string
	Epoch, Stale uint64
	data         []byte
}

// createFleet creates n workspaces through cl concurrently and prepares each (data.txt, the
// stale epoch, the loop's lease).
func createFleet(t *testing.T, cl *client.Client, prefix string, n int) []*fleetWS {
	t.Helper()
	fleet := make([]*fleetWS, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fleet[i], errs[i] = prepareWS(cl, fmt.Sprintf("%s-%d", prefix, i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("create the fleet: %v", err)
	}
	return fleet
}

func prepareWS(cl *client.Client, name string) (*fleetWS, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, err := cl.CreateWorkspace(ctx, api.CreateWorkspaceRequest{Name: name, Provider: "local"})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	if ws.State != api.StateReady {
		return nil, fmt.Errorf("created %s in state %s (%s)", name, ws.State, ws.Reason)
	}
	w := &fleetWS{ID: ws.ID, Alloc: ws.AllocationID, data: bytes.Repeat([]byte(name+"\n"), 1024)}
	if _, err := cl.WriteFile(ctx, ws.ID, "data.txt", bytes.NewReader(w.data), client.WriteOptions{}); err != nil {
		return nil, fmt.Errorf("%s: write data.txt: %w", name, err)
	}
	old, err := cl.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "stale", TTL: "1m"})
	if err != nil {
		return nil, fmt.Errorf("%s: lease: %w", name, err)
	}
	if err := cl.ReleaseLease(ctx, ws.ID, old.Epoch); err != nil {
		return nil, fmt.Errorf("%s: release lease: %w", name, err)
	}
	l, err := cl.AcquireLease(ctx, ws.ID, api.LeaseRequest{Holder: "loop", TTL: "30m"})
	if err != nil {
		return nil, fmt.Errorf("%s: lease: %w", name, err)
	}
	if l.Epoch <= old.Epoch {
		return nil, fmt.Errorf("%s: lease epoch %d after a released %d", name, l.Epoch, old.Epoch)
	}
	w.Epoch, w.Stale = l.Epoch, old.Epoch
	return w, nil
}

// trafficOps are the operations of one cycle on a workspace, in order.
var trafficOps = []string{"exec", "files get", "show", "stale write"}

// trafficOpTimeout bounds one operation: a hung one is a failure, not a hung test.
const trafficOpTimeout = time.Minute

// opRecord is one operation of the traffic.
type opRecord struct {
	op, ws     string
	start, end time.Time
	err        error
}

// traffic runs trafficOps in a loop on every workspace of a fleet, one goroutine each.
type traffic struct {
	cl    *client.Client
	fleet []*fleetWS
	stop  chan struct{}
	wg    sync.WaitGroup

	mu            sync.Mutex
	recs          []opRecord
	cycles        []int      // cycles completed, per workspace
	staleAccepted []opRecord // writes under a stale epoch that were accepted: never allowed
}

func startTraffic(cl *client.Client, fleet []*fleetWS) *traffic {
	tr := &traffic{cl: cl, fleet: fleet, stop: make(chan struct{}), cycles: make([]int, len(fleet))}
	for i, w := range fleet {
		tr.wg.Go(func() { tr.run(i, w) })
	}
	return tr
}

// Stop ends the loops once their current operation is done.
func (tr *traffic) Stop() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
}

func (tr *traffic) run(i int, w *fleetWS) {
	for n := 0; ; n++ {
		for _, op := range trafficOps {
			select {
			case <-tr.stop:
				return
			default:
			}
			r := opRecord{op: op, ws: w.ID, start: time.Now()}
			accepted, err := tr.do(op, w, n)
			r.end, r.err = time.Now(), err
			tr.mu.Lock()
			tr.recs = append(tr.recs, r)
			if accepted {
				tr.staleAccepted = append(tr.staleAccepted, r)
			}
			tr.mu.Unlock()
		}
		tr.mu.Lock()
		tr.cycles[i]++
		tr.mu.Unlock()
	}
}

// do runs one operation; staleAccepted says a write under the stale epoch was accepted.
func (tr *traffic) do(op string, w *fleetWS, n int) (staleAccepted bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), trafficOpTimeout)
	defer cancel()
	switch op {
	case "exec":
		var stderr bytes.Buffer
		exit, err := tr.cl.WithEpoch(w.Epoch).Exec(ctx, w.ID, protocol.ExecArgs{Argv: []string{"true"}}, nil, io.Discard, &stderr)
		if err == nil && exit.Status() != 0 {
			err = fmt.Errorf("true exited %d: %s", exit.Status(), stderr.String())
		}
		return false, err
	case "files get":
		var got bytes.Buffer
		if _, err := tr.cl.ReadFile(ctx, w.ID, "data.txt", &got, client.ReadOptions{}); err != nil {
			return false, err
		}
		if !bytes.Equal(got.Bytes(), w.data) {
			return false, fmt.Errorf("data.txt holds %d bytes, not the %d written", got.Len(), len(w.data))
		}
		return false, nil
	case "show":
		ws, err := tr.cl.GetWorkspace(ctx, w.ID)
		if err == nil && ws.State != api.StateReady {
			err = fmt.Errorf("workspace is %s (%s)", ws.State, ws.Reason)
		}
		return false, err
	case "stale write":
		_, err := tr.cl.WithEpoch(w.Stale).WriteFile(ctx, w.ID, fmt.Sprintf("stale-%d.txt", n), strings.NewReader("stale\n"), client.WriteOptions{})
		switch {
		case err == nil:
			return true, fmt.Errorf("a write under stale epoch %d (the lease is at %d) was accepted", w.Stale, w.Epoch)
		case protocol.CodeOf(err) == protocol.CodeStaleEpoch:
			return false, nil
		}
		return false, err
	}
	panic("unknown traffic op " + op)
}

// progress is the number of cycles each workspace's loop completed so far.
func (tr *traffic) progress() []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.cycles)
}

// WaitCycles waits until every workspace's loop completed k more cycles than when called.
func (tr *traffic) WaitCycles(t *testing.T, k int, within time.Duration) {
	t.Helper()
	from := tr.progress()
	eventually(t, within, fmt.Sprintf("%d more cycles of traffic on every workspace", k), func() bool {
		for i, n := range tr.progress() {
			if n < from[i]+k {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("cycles %v, from %v", tr.progress(), from) })
}

// Records is every operation recorded so far.
func (tr *traffic) Records() []opRecord {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.recs)
}

// StaleAccepted is every write under a stale epoch that was accepted.
func (tr *traffic) StaleAccepted() []opRecord {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.staleAccepted)
}

// CheckNoStaleFiles fails t if a file written under a stale epoch exists in any workspace: the
// last word on "no write under a stale epoch", whichever layer (controller or runner) should
// have refused it.
func (tr *traffic) CheckNoStaleFiles(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, w := range tr.fleet {
		cursor := ""
		for {
			page, err := tr.cl.ListFiles(ctx, w.ID, ".", cursor, 1000)
			if err != nil {
				t.Errorf("list the files of %s: %v", w.ID, err)
				break
			}
			for _, e := range page.Entries {
				if strings.HasPrefix(e.Name, "stale-") {
					t.Errorf("workspace %s holds %s, written under stale epoch %d", w.ID, e.Name, w.Stale)
				}
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
	}
}

// report logs the operations' outcomes, each failure in the phase class puts it in (classes
// in the order given), and returns the failures by class.
func report(t *testing.T, recs []opRecord, classes []string, class func(opRecord) string) map[string][]opRecord {
	t.Helper()
	ok, failed := map[string]int{}, map[string]int{}
	by := map[string][]opRecord{}
	for _, r := range recs {
		if r.err == nil {
			ok[r.op]++
			continue
		}
		failed[r.op]++
		c := class(r)
		by[c] = append(by[c], r)
	}
	for _, op := range trafficOps {
		t.Logf("  %-12s ok %5d  failed %3d", op, ok[op], failed[op])
	}
	for _, c := range classes {
		fs := by[c]
		t.Logf("  failed %s: %d", c, len(fs))
		for i, r := range fs {
			if i == 8 {
				t.Logf("      … and %d more", len(fs)-i)
				break
			}
			t.Logf("      %s %s (%s, %s): %v", r.op, r.ws, r.start.Format("15:04:05.000"), r.end.Sub(r.start).Round(time.Millisecond), r.err)
		}
	}
	return by
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of ds, which it sorts.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	k := int(float64(len(ds))*p/100+0.999999) - 1
	return ds[max(0, min(k, len(ds)-1))]
}
