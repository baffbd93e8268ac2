package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A command name may hold spaces and parentheses: fields are read after the last ')'.
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 12345 1000000 300 18446744073709551615"
	st, ok := parseProcStat([]byte(line))
	if !ok || st.ppid != 17 || st.cpu != 250+50+30+20 || st.rss != 300 {
		t.Fatalf("parsed %+v, %v", st, ok)
	}
	if _, ok := parseProcStat([]byte("4242 (no closing")); ok {
		t.Fatal("a line without ')' parsed")
	}
	if _, ok := parseProcStat([]byte("1 (x) S 0")); ok {
		t.Fatal("a short line parsed")
	}
}

func TestDiskUsageCountsEachInodeOnceWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 256<<10)
	if err := os.WriteFile(filepath.Join(dir, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	one, partial := diskUsage(dir, 1000)
	if partial || one < int64(len(data)) {
		t.Fatalf("one file: %d bytes (partial %v), want at least %d", one, partial, len(data))
	}
	// A hard link takes no more space; a symlink is not followed.
	if err := os.Link(filepath.Join(dir, "big"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr", filepath.Join(dir, "usr")); err != nil {
		t.Fatal(err)
	}
	two, _ := diskUsage(dir, 1000)
	if two >= one+int64(len(data)) {
		t.Fatalf("with a hard link and a symlink: %d bytes, was %d", two, one)
	}
	// The bound stops the walk and says so.
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, "f"+strings.Repeat("x", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, partial := diskUsage(dir, 5); !partial {
		t.Fatal("a walk past its bound not marked partial")
	}
	// A descriptor's path (how an isolated runner holds its root) is walked into.
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	viaFD, _ := diskUsage(filepath.Join("/proc/self/fd", strconv.Itoa(int(f.Fd()))), 1000)
	if viaFD < one {
		t.Fatalf("through /proc/self/fd: %d bytes, want at least %d", viaFD, one)
	}
}

// TestProcTreeSeesChildren: the process tree's CPU time includes a child's, and it grows as the
// child works (waited for by its condition, not by a time).
func TestProcTreeSeesChildren(t *testing.T) {
	cpu0, mem, err := procTree(os.Getpid())
	if err != nil || mem <= 0 {
		t.Fatalf("procTree: %v, memory %d", err, mem)
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		// The child is read first: the tree read after it includes at least that much of the
		// child's time (read the other way round, the child would always be ahead).
		child, _, _ := procTree(busy.Process.Pid)
		cpu, _, err := procTree(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		// The busy child alone accounts for more than this test's own work can.
		if child > 50*time.Millisecond && cpu >= cpu0+child {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tree's CPU time stayed at %v (from %v)", cpu, cpu0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var spin int

func TestUsageSamplerReportsCPUShare(t *testing.T) {
	s := newUsageSampler(UsageProc, t.TempDir(), os.Getpid())
	t0 := time.Now()
	if first := s.sample(t0); first.CPUPercent != 0 || first.Source != UsageProc || first.MemoryBytes <= 0 {
		t.Fatalf("first sample %+v", first)
	}
	// Spin until the process tree has used CPU since, then sample: the share is above 0 and
	// bounded by the CPUs there are.
	base, _, _ := procTree(os.Getpid())
	for deadline := time.Now().Add(time.Minute); ; {
		if cpu, _, _ := procTree(os.Getpid()); cpu > base+20*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no CPU time counted after a minute of spinning")
		}
		for i := 0; i < 1e6; i++ {
			spin++
		}
	}
	rep := s.sample(time.Now())
	if rep.CPUPercent <= 0 || rep.CPUPercent > float64(100*64) {
		t.Fatalf("cpu share %v", rep.CPUPercent)
	}
}

// BenchmarkDiskUsage walks a tree of 30,000 small files in 300 directories (the README's
// figure of what one disk sample costs).
func BenchmarkDiskUsage(b *testing.B) {
	dir := b.TempDir()
	for d := range 300 {
		sub := filepath.Join(dir, "d"+strconv.Itoa(d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(f)), []byte("hello"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, partial := diskUsage(dir, maxDiskEntries); partial {
			b.Fatal("partial")
		}
	}
}

// BenchmarkProcTree is one CPU and memory sample from /proc.
func BenchmarkProcTree(b *testing.B) {
	for b.Loop() {
		if _, _, err := procTree(os.Getpid()); err != nil {
			b.Fatal(err)
		}
	}
}
