package controller

import (
	"context"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/metrics"
	"github.com/tetherhq/tether/controller/store"
)

// meteredRuns is the state store with its runs counted as they are recorded: every run the
// controller starts or settles goes through CreateRun and FinishRun, so counting there misses
// none and needs no line beside each of their callers.
type meteredRuns struct {
	store.Store
	m *metrics.Metrics
}

func (s meteredRuns) CreateRun(ctx context.Context, r api.Run) error {
	err := s.Store.CreateRun(ctx, r)
	// A run recorded already ended (an artifact install's) counts once, by its FinishRun.
	if err == nil && r.State == api.RunRunning {
		s.m.Run(r.State)
	}
	return err
}

func (s meteredRuns) FinishRun(ctx context.Context, f store.RunFinish) error {
	err := s.Store.FinishRun(ctx, f)
	if err == nil {
		s.m.Run(f.State)
	}
	return err
}

// meteredReader adds the bytes read through it to a counter as they pass.
type meteredReader struct {
	r io.Reader
	c prometheus.Counter
}

func (c meteredReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.c.Add(float64(n))
	}
	return n, err
}
