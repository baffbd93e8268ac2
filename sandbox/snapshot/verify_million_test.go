package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/tetherhq/tether/sandbox/snapshot"
	"github.com/tetherhq/tether/sandbox/snapshot/snapshottest"
)

// heapPeak samples HeapInuse at the points the test chooses (every 10,000 entries, archive
// and manifest alike), so the bound holds whatever the scheduling.
type heapPeak struct {
	mu   sync.Mutex
	peak uint64
}

func (p *heapPeak) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.mu.Lock()
	p.peak = max(p.peak, ms.HeapInuse)
	p.mu.Unlock()
}

// verifyStreamed verifies the synthetic archive as it is written, through a pipe, and returns
// the peak heap seen.
func verifyStreamed(t *testing.T, tree snapshottest.Tree, verify func(io.Reader, func()) error) uint64 {
	runtime.GC()
	var peak heapPeak
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tree.Write(pw, peak.sample)) }()
	err := verify(pr, peak.sample)
	pr.CloseWithError(errors.New("verify returned"))
	if err != nil {
		t.Fatal(err)
	}
	peak.sample()
	return peak.peak
}

// TestVerifyMillionEntries: a manifest of 1,001,000 entries verifies in a bounded heap (the
// whole-manifest reader needed about 900 MB for as many).
func TestVerifyMillionEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 1,001,000 entries")
	}
	const bound = 64 << 20
	tree := snapshottest.Tree{Dirs: 1000, Files: 1000}
	var entries int
	peak := verifyStreamed(t, tree, func(r io.Reader, sample func()) error {
		v, err := snapshot.Verify(context.Background(), r, snapshot.VerifyOptions{OnEntry: func(snapshot.Entry) error {
			if entries++; entries%10_000 == 0 {
				sample()
			}
			return nil
		}})
		if err == nil && v.Totals.Entries != tree.Entries() {
			err = fmt.Errorf("verified %d entries", v.Totals.Entries)
		}
		return err
	})
	t.Logf("verify-million: %d entries verified, peak HeapInuse %.1f MiB (bound %d MiB)", entries, float64(peak)/(1<<20), bound>>20)
	if peak > bound {
		t.Fatalf("peak HeapInuse %d MiB, more than %d MiB", peak>>20, bound>>20)
	}
	if os.Getenv("TETHER_MEASURE_READMANIFEST") != "" {
		peak := verifyStreamed(t, tree, func(r io.Reader, _ func()) error {
			_, err := snapshot.ReadManifest(context.Background(), r)
			return err
		})
		t.Logf("read-manifest-million: peak HeapInuse %.1f MiB", float64(peak)/(1<<20))
	}
}
