// Package stablereadtest rewrites a file in place while a test reads it, to check that a reader
// never takes a torn mix of two versions for a consistent copy.
package stablereadtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Rewriter overwrites a file in place, over and over, with two versions of the same size (all
// 'A', all 'B'): each generation is one pwrite(2) over the whole file, with no truncation, so the
// only states a reader can see besides the two versions are torn ones.
//
// The write is made slow, as a write from a large input that is not in memory is: its source is a
// mapping of a file whose pages were just dropped from the page cache, read one page per fault
// (MADV_RANDOM). A write copies its source a large folio at a time after faulting it in, so a
// reader that starts while a write is under way soon overtakes it and reads old bytes past new
// ones; and since that write stamped the file's times before the reader's first stat and is often
// still running at its last, a before/after stat comparison sees nothing. Where pages cannot be
// dropped (tmpfs), the writes are fast and such tears rarer.
type Rewriter struct {
	A, B []byte

	path     string
	keepOpen bool
	srcs     [2]*os.File
	stop     chan struct{}
	wg       sync.WaitGroup
	gens     int
	err      error
}

// Start writes version A to path and starts rewriting it. With keepOpen the writer keeps one
// descriptor open for writing throughout; otherwise it opens and closes the file for each
// generation. Stop is registered as a cleanup too.
func Start(t testing.TB, path string, size int, keepOpen bool) *Rewriter {
	t.Helper()
	r := &Rewriter{A: bytes.Repeat([]byte{'A'}, size), B: bytes.Repeat([]byte{'B'}, size),
		path: path, keepOpen: keepOpen, stop: make(chan struct{})}
	srcDir := t.TempDir()
	for i, b := range [][]byte{r.A, r.B} {
		p := filepath.Join(srcDir, fmt.Sprint(i))
		must(t, os.WriteFile(p, b, 0o644))
		f, err := os.Open(p)
		must(t, err)
		t.Cleanup(func() { f.Close() })
		// Written back, so that dropping its pages works (dirty pages are not dropped).
		must(t, f.Sync())
		r.srcs[i] = f
	}
	must(t, os.WriteFile(path, r.A, 0o644))
	var f *os.File
	if keepOpen {
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
		must(t, err)
	}
	r.wg.Add(1)
	go r.run(f)
	t.Cleanup(func() { r.Stop() })
	return r
}

func (r *Rewriter) run(f *os.File) {
	defer r.wg.Done()
	if f != nil {
		defer f.Close()
	}
	for gen := 1; ; gen++ {
		select {
		case <-r.stop:
			r.gens = gen - 1
			return
		default:
		}
		if err := r.write(f, gen%2); err != nil {
			r.err, r.gens = err, gen-1
			return
		}
		time.Sleep(rand.N(2 * time.Millisecond))
	}
}

// write writes version v over the file in one pwrite from a freshly dropped mapping.
func (r *Rewriter) write(f *os.File, v int) error {
	fd, size := int(r.srcs[v].Fd()), len(r.A)
	if err := unix.Fadvise(fd, 0, int64(size), unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise: %w", err)
	}
	src, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	defer unix.Munmap(src)
	if err := unix.Madvise(src, unix.MADV_RANDOM); err != nil {
		return fmt.Errorf("madvise: %w", err)
	}
	if f == nil {
		if f, err = os.OpenFile(r.path, os.O_WRONLY, 0); err != nil {
			return err
		}
		defer f.Close()
	}
	// The raw system call: unix.Pwrite would have the race detector shadow the whole mapping
	// for every generation, which is most of the time these tests take under -race.
	n, _, errno := unix.Syscall6(unix.SYS_PWRITE64, f.Fd(), uintptr(unsafe.Pointer(&src[0])), uintptr(size), 0, 0, 0)
	switch {
	case errno != 0:
		return fmt.Errorf("pwrite: %w", errno)
	case int(n) != size:
		return fmt.Errorf("pwrite wrote %d of %d bytes", n, size)
	}
	return nil
}

// Stop ends the rewriting and returns how many generations were written after the first, and the
// writer's error if it failed. It may be called more than once.
func (r *Rewriter) Stop() (int, error) {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
	return r.gens, r.err
}

// Torn describes got when it is neither version whole, or returns "".
func (r *Rewriter) Torn(got []byte) string {
	if bytes.Equal(got, r.A) || bytes.Equal(got, r.B) {
		return ""
	}
	return fmt.Sprintf("a torn mix: %d bytes for %d, %d 'A' and %d 'B'",
		len(got), len(r.A), bytes.Count(got, []byte{'A'}), bytes.Count(got, []byte{'B'}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
