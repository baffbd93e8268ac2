package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tetherhq/tether/controller/api"
)

// isolationCost measures what the local provider's confinement costs: start → ready and an
// exec round trip of `true`, isolated (the default) beside the same with isolation=none, in the
// same run.
func (b *bench) isolationCost(ctx context.Context) error {
	n := b.cfg.starts
	startWith := func(opts map[string]string, label string) ([]time.Duration, error) {
		progress("start to ready: %d local workspaces, %s", n, label)
		return timedStarts(ctx, n, func(i int) (time.Duration, error) {
			ws, took, err := b.t.createWorkspaceReq(ctx, api.CreateWorkspaceRequest{
				Name: fmt.Sprintf("iso-%s-%d", label, i), Provider: "local", Options: opts})
			if ws.ID != "" {
				if derr := b.t.deleteWorkspace(ctx, ws.ID); err == nil {
					err = derr
				}
			}
			return took, err
		})
	}
	none := map[string]string{"isolation": "none"}
	isolated, err := startWith(nil, "isolated")
	if err != nil {
		return fmt.Errorf("isolated start: %w", err)
	}
	bare, err := startWith(none, "none")
	if err != nil {
		return fmt.Errorf("unisolated start: %w", err)
	}
	b.rep.add(result{Metric: fmt.Sprintf("start → ready, local, p50 of %d", n), Unit: unitMS, N: n, RefN: n,
		Tether: val(ms(summarize(isolated).P50)), TetherTool: "isolated (namespaces, the default; the provider probes once per runner binary, in the untimed warm-up)",
		Reference: val(ms(summarize(bare).P50)), ReferenceTool: "the same with `--provider-opt isolation=none`"})

	ws, _, err := b.t.createWorkspaceReq(ctx, api.CreateWorkspaceRequest{Name: "iso-exec-none", Provider: "local", Options: none})
	if err != nil {
		return fmt.Errorf("unisolated workspace: %w", err)
	}
	defer b.t.deleteWorkspace(ctx, ws.ID)
	progress("exec round trip: %d × `true`, isolated and not", b.cfg.n)
	confined, err := sample(ctx, b.cfg.n, 5, func() error { return b.t.exec(ctx, b.ws.ID, io.Discard, "true") })
	if err != nil {
		return fmt.Errorf("isolated exec: %w", err)
	}
	plain, err := sample(ctx, b.cfg.n, 5, func() error { return b.t.exec(ctx, ws.ID, io.Discard, "true") })
	if err != nil {
		return fmt.Errorf("unisolated exec: %w", err)
	}
	for _, q := range []struct {
		name string
		pick func(durStats) time.Duration
	}{{"p50", func(s durStats) time.Duration { return s.P50 }}, {"p90", func(s durStats) time.Duration { return s.P90 }}} {
		b.rep.add(result{Metric: fmt.Sprintf("exec `true` round trip, local, %s of %d", q.name, b.cfg.n), Unit: unitMS, N: b.cfg.n, RefN: b.cfg.n,
			Tether: val(ms(q.pick(summarize(confined)))), TetherTool: "Go client Exec, isolated (namespaces)",
			Reference: val(ms(q.pick(summarize(plain)))), ReferenceTool: "the same with `--provider-opt isolation=none`"})
	}
	return nil
}
