package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/service"
)

// killWait bounds how long a run's process group may take to disappear after SIGKILL: a process
// still there then will not die (uninterruptible sleep), and close must not save around it.
const killWait = 5 * time.Second

// quiesce stops every run and service so that a close's last capture sees a tree nothing writes
// to any more, and closes the gate on new ones (see protocol.OpQuiesce).
func (r *Runner) quiesce(ctx context.Context, _ *yamux.Stream, args protocol.QuiesceArgs) (protocol.QuiesceResult, error) {
	if args.Release {
		r.runs.resume()
		r.services.Resume()
		return protocol.QuiesceResult{Runs: []protocol.RunStatus{}, Services: []protocol.ServiceStatus{}}, nil
	}
	grace := time.Duration(args.Grace)
	if grace <= 0 {
		grace = service.DefaultGrace
	}
	reason := args.Reason
	if reason == "" {
		reason = "stopped because the workspace is closing"
	}
	// Both gates close before anything is listed: whatever starts later is refused.
	pending := r.runs.quiesce()
	r.services.Quiesce()

	res := protocol.QuiesceResult{Runs: make([]protocol.RunStatus, len(pending))}
	errs := make([]error, len(pending))
	var wg sync.WaitGroup
	for i, q := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.stopRun(ctx, q, grace)
			res.Runs[i] = r.runs.status(q.id)
		}()
	}
	wg.Wait()
	sort.Slice(res.Runs, func(i, j int) bool { return res.Runs[i].RunID < res.Runs[j].RunID })
	var stuck []string
	for i, err := range errs {
		if err != nil {
			stuck = append(stuck, err.Error())
			continue
		}
		// An on-run-finish service stops for its run's end, with that reason, before the rest.
		r.services.RunFinished(pending[i].id)
	}
	svcs, serr := r.services.StopEvery(ctx, grace, reason)
	res.Services = svcs
	if len(stuck) > 0 {
		msg := fmt.Sprintf("%d of %d run(s) did not stop: %s", len(stuck), len(pending), strings.Join(stuck, "; "))
		if serr != nil {
			msg += "; " + protocol.AsError(serr).Message
		}
		return res, protocol.Errorf(protocol.CodeFailed, "%s", msg)
	}
	return res, serr
}

// stopRun ends one run: SIGTERM to its process group (a confined command's init passes it on),
// SIGKILL after grace, and then waits until the run is over and nothing is left in its group.
func (r *Runner) stopRun(ctx context.Context, q quiescing, grace time.Duration) error {
	if q.proc != nil {
		_ = q.proc.Signal(syscall.SIGTERM)
	}
	// A run still starting has no process yet: it is killed as it starts (runTable.started).
	t := r.cfg.Clock.NewTimer(grace)
	defer t.Stop()
	select {
	case <-q.ended:
	case <-ctx.Done():
		return fmt.Errorf("run %s: %w", q.id, ctx.Err())
	case <-t.Chan():
		if q.proc != nil {
			q.proc.Cancel()
		}
		// killWait bounds the kernel, not a policy: real time.
		k := time.NewTimer(killWait)
		defer k.Stop()
		select {
		case <-q.ended:
		case <-ctx.Done():
			return fmt.Errorf("run %s: %w", q.id, ctx.Err())
		case <-k.C:
			return fmt.Errorf("run %s is still running %s after SIGKILL", q.id, killWait)
		}
	}
	pid := r.runs.status(q.id).PID
	if pid == 0 {
		return nil // released before it started
	}
	return groupEmpty(ctx, pid)
}

// groupEmpty kills whatever a run left in its process group once its leader exited, and waits
// until the group is gone.
func groupEmpty(ctx context.Context, pgid int) error {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return nil
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(killWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d still has processes %s after SIGKILL", pgid, killWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
