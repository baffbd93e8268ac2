package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// durStats summarizes timed samples.
type durStats struct {
	N             int
	P50, P90, P99 time.Duration
	Min, Max      time.Duration
}

func summarize(ds []time.Duration) durStats {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return durStats{}
	}
	return durStats{N: len(s), P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99), Min: s[0], Max: s[len(s)-1]}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// median of floats; the mean of the two middle values for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sample runs fn warm times untimed, then n times timed.
func sample(ctx context.Context, n, warm int, fn func() error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := range warm + n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		if i >= warm {
			out = append(out, time.Since(start))
		}
	}
	return out, nil
}

// hashCounter counts and hashes what is written to it.
type hashCounter struct {
	n int64
	h hash.Hash
}

func newHashCounter() *hashCounter { return &hashCounter{h: sha256.New()} }

func (w *hashCounter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}

func (w *hashCounter) sum() string { return hex.EncodeToString(w.h.Sum(nil)) }

// zeroSHA256 is the SHA-256 of n zero bytes, what `head -c n /dev/zero` must produce.
func zeroSHA256(n int64) string {
	h := sha256.New()
	_, _ = io.CopyN(h, zeroReader{}, n)
	return hex.EncodeToString(h.Sum(nil))
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// throughput runs fn rounds times, each streaming size bytes of zeros into a fresh counter,
// checks count and hash, and returns MiB/s per round.
func throughput(ctx context.Context, rounds int, size int64, want string, fn func(io.Writer) error) ([]float64, error) {
	var out []float64
	for range rounds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := newHashCounter()
		start := time.Now()
		if err := fn(w); err != nil {
			return nil, err
		}
		took := time.Since(start)
		if w.n != size {
			return nil, fmt.Errorf("got %d bytes, want %d", w.n, size)
		}
		if got := w.sum(); got != want {
			return nil, fmt.Errorf("sha256 %s, want %s", got, want)
		}
		out = append(out, float64(size)/(1<<20)/took.Seconds())
	}
	return out, nil
}

// procStatus reads one field of /proc/PID/status.
func procStatus(pid int, field string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// vmRSS is a process's resident set size in bytes.
func vmRSS(pid int) (float64, error) {
	v, err := procStatus(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("VmRSS %q: %v", v, err)
	}
	return float64(kb * 1024), nil
}

func parentPID(pid int) (int, error) {
	v, err := procStatus(pid, "PPid")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}

func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

func fileSize(path string) (float64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return float64(fi.Size()), nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// cpuSeconds is the user+system CPU time a process has used so far, from /proc/PID/stat
// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it follow its ')'.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks float64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15 of the whole line
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += float64(n)
	}
	return ticks / 100, nil
}

// procsCPU reads cpuSeconds of each process; an unreadable one counts as -1.
func procsCPU(procs []proc) []float64 {
	out := make([]float64, len(procs))
	for i, p := range procs {
		s, err := cpuSeconds(p.pid)
		if err != nil {
			s = -1
		}
		out[i] = s
	}
	return out
}

// cpuSpent says how many CPU seconds each process used since before (procsCPU's answer).
func cpuSpent(procs []proc, before []float64) string {
	after := procsCPU(procs)
	parts := make([]string, len(procs))
	for i, p := range procs {
		if before[i] < 0 || after[i] < 0 {
			parts[i] = p.name + " n/a"
			continue
		}
		parts[i] = fmt.Sprintf("%s %.2f s", p.name, after[i]-before[i])
	}
	return strings.Join(parts, ", ")
}
