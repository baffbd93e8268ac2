package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// forkCount is how many workspaces the fork row makes; forkGoal is issue 17's bound on it, in
// restores of the same receipt.
const (
	forkCount = 10
	forkGoal  = 3.0
)

// forkRow forks the snapshot workspace 10 times from snap (ForkWorkspace --from, so no capture is
// timed) and reports it beside one restore of the same receipt measured in the same run.
func (s *snapBench) forkRow(ctx context.Context, snap api.Snapshot, restoreSecs float64) {
	metric := fmt.Sprintf("fork of %d from the %.0f MiB workspace, beside one restore of the same receipt", forkCount, mib(s.bytes))
	tool := fmt.Sprintf("Go client ForkWorkspace --count %d --from %s (%d restores, 4 at a time, all ready)", forkCount, snap.ID, forkCount)
	refTool := fmt.Sprintf("one RestoreSnapshot of the same receipt (median of this run's restore rounds); goal ≤ %.0f×", forkGoal)
	progress("snapshot: fork of %d from %s", forkCount, snap.ID)
	cctx, cancel := context.WithTimeout(ctx, snapOpTimeout)
	defer cancel()
	start := time.Now()
	res, err := s.t.cl.ForkWorkspace(cctx, s.ws.ID, api.ForkRequest{Count: forkCount, From: snap.ID, NamePrefix: "bench-fork"})
	took := time.Since(start)
	for _, w := range res.Workspaces {
		s.t.track(w.ID)
	}
	if err != nil {
		s.failed(metric, unitMS, tool, fmt.Errorf("ForkWorkspace after %s: %w", took.Round(time.Millisecond), err))
		return
	}
	head, headErr := gitHead(ctx, s.ws.Root)
	for _, w := range res.Workspaces {
		if err := s.checkRestored(ctx, w, head, headErr); err != nil {
			s.failed(metric, unitMS, tool, fmt.Errorf("fork %s: %w", w.Name, err))
			return
		}
	}
	progress("snapshot: fork of %d in %s (one restore: %.2f s)", forkCount, took.Round(time.Millisecond), restoreSecs)
	s.rep.add(result{Metric: metric, Unit: unitMS, Tether: val(float64(took.Milliseconds())), TetherTool: tool, N: 1,
		Reference: val(restoreSecs * 1000), ReferenceTool: refTool, RefN: 1})
	for _, w := range res.Workspaces {
		if err := s.t.deleteWorkspace(ctx, w.ID); err != nil {
			s.rep.note("fork row: remove %s: %v", w.Name, err)
		}
	}
}
