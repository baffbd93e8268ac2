package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// pairWriter is the two-file writer of the torn-write loop: each round writes the counter n to
// a.txt, then n to z.txt (fixed width, in place, each write through a fresh descriptor), so at
// every instant a is z or z+1. The test hands it batches of rounds through an unbuffered channel:
// a send returns once the previous batch is written, so a batch of 0 leaves the writer at rest.
type pairWriter struct {
	a, z   string
	rounds chan int
	done   sync.WaitGroup
	n      int
	err    error
}

func startPairWriter(t *testing.T, dir string) *pairWriter {
	t.Helper()
	w := &pairWriter{rounds: make(chan int), a: filepath.Join(dir, "a.txt"), z: filepath.Join(dir, "z.txt")}
	w.put(w.a, 0)
	w.put(w.z, 0)
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for k := range w.rounds {
			for range k {
				w.n++
				w.put(w.a, w.n)
				w.put(w.z, w.n)
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *pairWriter) put(name string, n int) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteAt(fmt.Appendf(nil, "%010d\n", n), 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil && w.err == nil {
		w.err = err
	}
}

// stop ends the writer once its last batch is written.
func (w *pairWriter) stop() {
	if w.rounds == nil {
		return
	}
	close(w.rounds)
	w.rounds = nil
	w.done.Wait()
}

// counter parses a file the pair writer wrote.
func counter(t *testing.T, b []byte) int {
	t.Helper()
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		t.Fatalf("archived counter %q: %v", b, err)
	}
	return n
}

// TestCaptureIsOneInstant is the torn-write loop: captures race a writer that updates a.txt then
// z.txt with the same increasing counter. A capture that succeeds must hold a and z of one
// instant (a = z or a = z+1); without the tree-wide fence, captures that read a before a round
// and z after it publish a = 5802, z = 6086. Each attempt lets the writer write a varying number
// of rounds while the capture runs, so some captures overlap writes and some do not.
func TestCaptureIsOneInstant(t *testing.T) {
	captures := 300
	if testing.Short() {
		captures = 60
	}
	dir := t.TempDir()
	for i := range 20 {
		writeFile(t, filepath.Join(dir, "m", fmt.Sprintf("f%02d.txt", i)), "filler", 0o644)
	}
	w := startPairWriter(t, dir)
	root := openRoot(t, dir)
	var ok, refused, mixed int
	buf := new(bytes.Buffer)
	for i := range captures {
		w.rounds <- i % 7 * 40 // 0 rounds every 7th attempt: the writer is then at rest
		buf.Reset()
		_, err := Capture(context.Background(), root, buf, CaptureOptions{Concurrency: 1})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeChangedDuringCapture {
				t.Fatalf("capture %d: %v", i, err)
			}
			refused++
			continue
		}
		a, z := counter(t, archivedFile(t, buf.Bytes(), "a.txt")), counter(t, archivedFile(t, buf.Bytes(), "z.txt"))
		if a != z && a != z+1 {
			mixed++
			if mixed <= 5 {
				t.Errorf("capture %d succeeded with a = %d, z = %d: no instant of the tree held both", i, a, z)
			}
			continue
		}
		ok++
	}
	w.stop()
	if w.err != nil {
		t.Fatal(w.err)
	}
	t.Logf("torn-write loop: %d captures while the writer made %d rounds: %d one instant, %d changed_during_capture, %d mixed instants",
		captures, w.n, ok, refused, mixed)
	if mixed > 0 {
		t.Fatalf("%d of %d successful captures mixed instants", mixed, ok+mixed)
	}
	if ok == 0 {
		t.Fatal("no capture succeeded: the loop proved nothing")
	}
}
