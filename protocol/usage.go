package protocol

// OpUsageReport is opened by the RUNNER: the resource usage of its sandbox, sampled every
// UsageInterval or so (Args: UsageReport). The controller answers with a trailer; it keeps the
// latest report per runner connection, in memory, and refuses one out of bounds.
const OpUsageReport = "usage_report"

// UsageReport is one sample of a sandbox's resource usage, as its runner measured it.
type UsageReport struct {
	// CPUPercent is the CPU time used over the interval since the previous sample, in percent
	// of one CPU (150 is one and a half CPUs busy).
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryBytes is the memory in use: the cgroup's memory.current, or the resident sets of
	// the runner's process tree.
	MemoryBytes int64 `json:"memory_bytes"`
	// DiskBytes is the space the workspace's files take (allocated blocks, each inode once).
	DiskBytes int64 `json:"disk_bytes"`
	// Source says where the numbers come from: "cgroup" or "proc".
	Source string `json:"source,omitempty"`
	// DiskPartial is set when the disk walk stopped at its entry bound or skipped directories
	// it could not read: DiskBytes is then a lower bound.
	DiskPartial bool `json:"disk_partial,omitempty"`
}
