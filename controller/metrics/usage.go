package metrics

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetherhq/tether/protocol"
)

// Usage is the latest resource usage a workspace's runner reported, stamped with the
// controller's time of receipt (the runner's clock is not trusted for it).
type Usage struct {
	CPUPercent  float64
	MemoryBytes int64
	DiskBytes   int64
	SampledAt   time.Time
}

// Bounds on what a runner may report: generous for any real machine, and small enough that a
// hostile runner's number cannot overflow a sum or a dashboard. A report outside them is
// refused whole; nothing of it is kept.
const (
	MaxCPUPercent  = 100 * 4096 // a 4096-CPU machine, every CPU busy
	MaxMemoryBytes = 1 << 50    // 1 PiB
	MaxDiskBytes   = 1 << 60    // 1 EiB
	// MinReportInterval is how often one runner may report: the runner samples every 15 s; a
	// report sooner than this after the last one is refused, so a runner cannot make the
	// controller busy with them.
	MinReportInterval = time.Second
)

type usageEntry struct {
	workspace string
	usage     Usage
}

// usageTable is the latest usage per allocation (one runner connection each), in memory only:
// a controller that restarts, or a runner that moves to another controller, starts with none
// until the next report.
type usageTable struct {
	cpu, mem, disk *prometheus.Desc

	mu sync.Mutex
	m  map[string]usageEntry
}

func newUsageTable() *usageTable {
	desc := func(d Def) *prometheus.Desc { return prometheus.NewDesc(d.Name, d.Help, d.Labels, nil) }
	return &usageTable{cpu: desc(WorkspaceCPU), mem: desc(WorkspaceMemory), disk: desc(WorkspaceDisk), m: map[string]usageEntry{}}
}

// Describe and Collect make the table a collector: a series per workspace with a report, gone
// once its runner disconnects (DropUsage).
func (t *usageTable) Describe(ch chan<- *prometheus.Desc) {
	ch <- t.cpu
	ch <- t.mem
	ch <- t.disk
}

func (t *usageTable) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// SetUsage keeps one entry per workspace; the newest is taken here as well, so a scrape never
	// gathers two series of one workspace whatever the table holds.
	newest := map[string]usageEntry{}
	for _, e := range t.m {
		if n, ok := newest[e.workspace]; !ok || e.usage.SampledAt.After(n.usage.SampledAt) {
			newest[e.workspace] = e
		}
	}
	for _, e := range newest {
		ch <- prometheus.MustNewConstMetric(t.cpu, prometheus.GaugeValue, e.usage.CPUPercent, e.workspace)
		ch <- prometheus.MustNewConstMetric(t.mem, prometheus.GaugeValue, float64(e.usage.MemoryBytes), e.workspace)
		ch <- prometheus.MustNewConstMetric(t.disk, prometheus.GaugeValue, float64(e.usage.DiskBytes), e.workspace)
	}
}

// CheckUsage refuses a report that is not a usage a real sandbox could have.
func CheckUsage(r protocol.UsageReport) error {
	switch {
	case math.IsNaN(r.CPUPercent) || math.IsInf(r.CPUPercent, 0) || r.CPUPercent < 0 || r.CPUPercent > MaxCPUPercent:
		return protocol.Errorf(protocol.CodeInvalidArgument, "usage report: cpu_percent %v is outside 0–%d", r.CPUPercent, MaxCPUPercent)
	case r.MemoryBytes < 0 || r.MemoryBytes > MaxMemoryBytes:
		return protocol.Errorf(protocol.CodeInvalidArgument, "usage report: memory_bytes %d is outside 0–%d", r.MemoryBytes, int64(MaxMemoryBytes))
	case r.DiskBytes < 0 || r.DiskBytes > MaxDiskBytes:
		return protocol.Errorf(protocol.CodeInvalidArgument, "usage report: disk_bytes %d is outside 0–%d", r.DiskBytes, int64(MaxDiskBytes))
	}
	return nil
}

// SetUsage keeps a runner's report as its workspace's latest usage, received at at. A report
// CheckUsage refuses, or one sooner than MinReportInterval after the last, is counted as
// refused and changes nothing.
func (m *Metrics) SetUsage(allocation, workspace string, r protocol.UsageReport, at time.Time) error {
	if err := CheckUsage(r); err != nil {
		m.UsageRefused()
		return err
	}
	t := m.usage
	t.mu.Lock()
	defer t.mu.Unlock()
	if last, ok := t.m[allocation]; ok && at.Sub(last.usage.SampledAt) < MinReportInterval {
		m.UsageRefused()
		return protocol.Errorf(protocol.CodeInvalidArgument, "usage report %s after the last: reports come at most once a %s",
			at.Sub(last.usage.SampledAt), MinReportInterval)
	}
	// One entry per workspace: a report of an older allocation that raced its runner's
	// disconnect would otherwise make two series of one workspace, and a scrape fails on those.
	for k, e := range t.m {
		if e.workspace == workspace && k != allocation {
			delete(t.m, k)
		}
	}
	t.m[allocation] = usageEntry{workspace: workspace, usage: Usage{CPUPercent: r.CPUPercent, MemoryBytes: r.MemoryBytes,
		DiskBytes: r.DiskBytes, SampledAt: at}}
	return nil
}

// UsageRefused counts a usage report refused before it reached SetUsage (it did not decode).
func (m *Metrics) UsageRefused() { m.usageRefused.Inc() }

// Usage is the latest usage reported for the allocation, if its runner reported one since it
// connected here.
func (m *Metrics) Usage(allocation string) (Usage, bool) {
	m.usage.mu.Lock()
	defer m.usage.mu.Unlock()
	e, ok := m.usage.m[allocation]
	return e.usage, ok
}

// DropUsage forgets the allocation's usage (its runner disconnected): its series go with it.
func (m *Metrics) DropUsage(allocation string) {
	m.usage.mu.Lock()
	defer m.usage.mu.Unlock()
	delete(m.usage.m, allocation)
}
