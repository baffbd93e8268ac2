package runner

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Usage reports: the runner samples its sandbox's CPU, memory and disk and sends them to the
// controller (protocol.OpUsageReport), which shows the latest with the workspace and exports
// it as gauges.
const (
	// usageFirst is how soon after the runner starts the first report goes: soon enough that a
	// new workspace shows its usage, late enough to measure CPU over a real interval.
	usageFirst = 2 * time.Second
	// usageEvery is the interval of the later reports.
	usageEvery = 15 * time.Second
	// diskWalkShare bounds the disk walk to a twentieth of one CPU: a walk that took d is not
	// made again before 20·d has passed (the last total is reported meanwhile), so a workspace
	// of millions of files is walked less often instead of keeping a CPU busy.
	diskWalkShare = 20
	// maxDiskEntries bounds one walk; a tree with more reports what the walk counted, marked
	// partial.
	maxDiskEntries = 2_000_000
	// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux ABI Go supports.
	clockTicks = 100
)

// Usage sources (UsageSource, protocol.EnvUsageSource).
const (
	// UsageCgroup reads the runner's cgroup (v2, or v1's cpuacct and memory controllers):
	// right where the sandbox is a cgroup of its own, as a container is.
	UsageCgroup = "cgroup"
	// UsageProc sums the runner's process tree from /proc: right wherever the runner's cgroup
	// is shared with others (the local provider runs it in the controller's).
	UsageProc = "proc"
)

// usageSampler measures a sandbox. It is used from one goroutine.
type usageSampler struct {
	source string // UsageCgroup or UsageProc
	// cpu and mem read the cgroup (UsageCgroup): v2's files, or v1's where that is what the
	// container has.
	cpu  func() (time.Duration, error)
	mem  func() (int64, error)
	root string // the workspace root, walked for disk usage
	pid  int    // the runner's pid: the root of the process tree (UsageProc)

	lastCPU  time.Duration // CPU time at the last sample
	lastAt   time.Time     // wall time of the last sample
	haveLast bool

	disk        int64
	diskPartial bool
	nextWalk    time.Time
}

// newUsageSampler samples with source when it can be read, else from /proc.
func newUsageSampler(source, root string, pid int) *usageSampler {
	s := &usageSampler{source: UsageProc, root: root, pid: pid}
	if source != UsageCgroup {
		return s
	}
	const dir = "/sys/fs/cgroup"
	v2cpu := func() (time.Duration, error) { return readCgroupCPU(dir) }
	v1cpu := func() (time.Duration, error) {
		ns, err := readInt(filepath.Join(dir, "cpuacct", "cpuacct.usage"))
		return time.Duration(ns), err
	}
	if _, err := v2cpu(); err == nil {
		s.source, s.cpu, s.mem = UsageCgroup, v2cpu, func() (int64, error) { return readInt(filepath.Join(dir, "memory.current")) }
	} else if _, err := v1cpu(); err == nil {
		s.source, s.cpu, s.mem = UsageCgroup, v1cpu, func() (int64, error) { return readInt(filepath.Join(dir, "memory", "memory.usage_in_bytes")) }
	}
	return s
}

// sample measures the sandbox now. CPU is the share over the interval since the previous
// sample (0 for the first); a measure that fails is reported as 0 rather than not at all.
func (s *usageSampler) sample(now time.Time) protocol.UsageReport {
	rep := protocol.UsageReport{Source: s.source}
	var cpu time.Duration
	var err error
	if s.source == UsageCgroup {
		cpu, err = s.cpu()
		rep.MemoryBytes, _ = s.mem()
	} else {
		cpu, rep.MemoryBytes, err = procTree(s.pid)
	}
	if err == nil {
		if s.haveLast && cpu >= s.lastCPU && now.After(s.lastAt) {
			rep.CPUPercent = 100 * float64(cpu-s.lastCPU) / float64(now.Sub(s.lastAt))
		}
		// A counter that went back (processes whose time left the tree) starts a new interval.
		s.lastCPU, s.lastAt, s.haveLast = cpu, now, true
	}
	if !now.Before(s.nextWalk) {
		start := time.Now()
		s.disk, s.diskPartial = diskUsage(s.root, maxDiskEntries)
		s.nextWalk = now.Add(diskWalkShare * time.Since(start))
	}
	rep.DiskBytes, rep.DiskPartial = s.disk, s.diskPartial
	return rep
}

// readCgroupCPU is the cgroup's cpu.stat usage_usec.
func readCgroupCPU(dir string) (time.Duration, error) {
	b, err := readSmall(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(n) * time.Microsecond, nil
		}
	}
	return 0, errors.New("cpu.stat has no usage_usec")
}

// readInt reads a kernel file holding one number.
func readInt(path string) (int64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readSmall reads a kernel file of a few lines.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if n == 0 && err != nil {
		return nil, err
	}
	return b[:n], nil
}

// procStat is what usage needs of /proc/PID/stat.
type procStat struct {
	ppid int
	cpu  int64 // utime+stime+cutime+cstime, in clock ticks
	rss  int64 // pages
}

// parseProcStat reads the fields after the command name, which may hold spaces and
// parentheses of its own: everything up to the last ')' is skipped.
func parseProcStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return procStat{}, false
	}
	num := func(k int) int64 { n, _ := strconv.ParseInt(f[k], 10, 64); return n }
	// f[0] is field 3 of proc(5): state, ppid, …, utime (14), stime, cutime, cstime, …, rss (24).
	return procStat{ppid: int(num(1)), cpu: num(11) + num(12) + num(13) + num(14), rss: num(21)}, true
}

// procTree sums the CPU time and resident memory of root and every process under it. A
// process's cutime and cstime hold the children it reaped, so the sum includes processes that
// ended inside the tree; resident sets count a page shared by two processes twice.
func procTree(root int) (cpu time.Duration, mem int64, err error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	stats := map[int]procStat{}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := readSmall("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		if st, ok := parseProcStat(b); ok {
			stats[pid] = st
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	if _, ok := stats[root]; !ok {
		return 0, 0, errors.New("the runner's own process is not in /proc")
	}
	var ticks, pages int64
	seen := map[int]bool{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		st := stats[pid]
		ticks += st.cpu
		pages += st.rss
		queue = append(queue, children[pid]...)
	}
	return time.Duration(ticks) * time.Second / clockTicks, pages * int64(os.Getpagesize()), nil
}

// diskUsage is the space the files under root take: allocated blocks, each inode once (hard
// links), not following symlinks nor crossing into another filesystem. It stops after max
// entries; partial says it stopped, or skipped a directory it could not read.
func diskUsage(root string, max int) (total int64, partial bool) {
	// The root may be a descriptor's path (/proc/self/fd/N): "/." makes the walk go into it.
	var rootDev uint64
	if fi, err := os.Stat(root); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			rootDev = uint64(st.Dev)
		}
	}
	type inode struct{ dev, ino uint64 }
	linked := map[inode]bool{}
	n := 0
	_ = filepath.WalkDir(root+"/.", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			partial = true
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > max {
			partial = true
			return fs.SkipAll
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone since the listing
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if uint64(st.Dev) != rootDev && d.IsDir() {
			return fs.SkipDir // a mount inside the workspace is not its disk
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if linked[k] {
				return nil
			}
			linked[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, partial
}

// reportUsage samples the sandbox and reports to the controller: first after usageFirst, then
// every usageEvery, while ctx lasts. Without a connection a sample is taken all the same (the
// CPU interval stays right) and not sent. Its timer is on wall time, not the runner's Clock: it
// measures the kernel's counters, and a test's fake clock must not count it as a waiter.
func (r *Runner) reportUsage(ctx context.Context) {
	s := newUsageSampler(r.cfg.UsageSource, r.root, os.Getpid())
	s.sample(time.Now())
	t := time.NewTimer(usageFirst)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(usageEvery)
		rep := s.sample(time.Now())
		r.mu.Lock()
		sess := r.sess
		r.mu.Unlock()
		if sess == nil {
			continue
		}
		if err := callOn(sess, protocol.OpUsageReport, rep); err != nil {
			r.cfg.Logger.Debug("usage report not taken", "err", err)
		}
	}
}
