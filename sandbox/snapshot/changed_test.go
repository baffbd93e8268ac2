package snapshot

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// gateWriter holds the first write until release is closed, so that a
// test can change the tree while Capture is known to be reading it.
type gateWriter struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gateWriter {
	return &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.started) })
	<-g.release
	time.Sleep(time.Millisecond) // and stays slow
	return len(p), nil
}

func bigFile(t testing.TB, p string, size int) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, b, 0o644))
}

// captureWhile runs Capture into a gated writer and calls change once the
// archive has started to flow, while the big file is being read.
func captureWhile(t *testing.T, dir string, change func()) error {
	t.Helper()
	g := newGate()
	done := make(chan error, 1)
	go func() {
		_, err := Capture(context.Background(), openRoot(t, dir), g, CaptureOptions{Concurrency: 2})
		done <- err
	}()
	select {
	case <-g.started:
	case err := <-done:
		t.Fatalf("capture ended before writing: %v", err)
	}
	change()
	close(g.release)
	return <-done
}

func TestChangedDuringCaptureFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big.bin")
	bigFile(t, p, 48<<20)
	err := captureWhile(t, dir, func() {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.Write([]byte("more"))
		must(t, err)
		must(t, f.Close())
	})
	wantCode(t, err, CodeChangedDuringCapture)
	var e *Error
	if !errors.As(err, &e) || e.Path != "big.bin" {
		t.Fatalf("error names %v", err)
	}
}

func TestChangedDuringCaptureRewriteInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big.bin")
	bigFile(t, p, 48<<20)
	err := captureWhile(t, dir, func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("rewritten"), 1<<20)
		must(t, err)
		must(t, f.Close())
	})
	wantCode(t, err, CodeChangedDuringCapture)
}

func TestChangedDuringCaptureTruncated(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big.bin")
	bigFile(t, p, 48<<20)
	err := captureWhile(t, dir, func() { must(t, os.Truncate(p, 1<<20)) })
	wantCode(t, err, CodeChangedDuringCapture)
}

func TestChangedDuringCaptureDirectory(t *testing.T) {
	dir := t.TempDir()
	bigFile(t, filepath.Join(dir, "d", "big.bin"), 48<<20)
	err := captureWhile(t, dir, func() {
		writeFile(t, filepath.Join(dir, "d", "new.txt"), "appeared", 0o644)
	})
	wantCode(t, err, CodeChangedDuringCapture)
	var e *Error
	if !errors.As(err, &e) || e.Path != "d" {
		t.Fatalf("error names %v", err)
	}
}

func TestChangedDuringCaptureRemovedEntry(t *testing.T) {
	dir := t.TempDir()
	bigFile(t, filepath.Join(dir, "a", "big.bin"), 48<<20)
	writeFile(t, filepath.Join(dir, "b", "later.txt"), "x", 0o644)
	err := captureWhile(t, dir, func() { must(t, os.RemoveAll(filepath.Join(dir, "b"))) })
	wantCode(t, err, CodeChangedDuringCapture)
}

// TestCaptureStopsWriting: after a failure nothing more reaches w, and a
// context cancel stops a capture.
func TestCaptureCancel(t *testing.T) {
	dir := t.TempDir()
	bigFile(t, filepath.Join(dir, "big.bin"), 16<<20)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Capture(ctx, openRoot(t, dir), io.Discard, CaptureOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
