package stableread

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/sandbox/stableread/stablereadtest"
	"golang.org/x/sys/unix"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newFile writes body to a fresh file and opens it read-only.
func newFile(t *testing.T, body string) (string, *os.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.txt")
	must(t, os.WriteFile(p, []byte(body), 0o644))
	f, err := os.Open(p)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return p, f
}

// readAll reads the whole file as Begin saw it and returns its SHA-256.
func readAll(t *testing.T, r *Read, f *os.File) []byte {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, r.Info().Size())); err != nil {
		t.Fatal(err)
	}
	return h.Sum(nil)
}

// needLeases skips when this process cannot take leases on its own files.
func needLeases(t *testing.T, f *os.File) {
	t.Helper()
	if ProbeWriters(f) == WritersUnknown {
		t.Skip("no read lease to be had here (filesystem, fs.leases-enable or ownership)")
	}
}

func wantChanged(t *testing.T, err error, path, reason string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.ErrorCode() != "changed_during_capture" || e.Path != path || !strings.Contains(e.Reason, reason) {
		t.Fatalf("want changed_during_capture for %s (%s), got %v", path, reason, err)
	}
	if !strings.HasPrefix(err.Error(), "changed_during_capture: "+path+": ") {
		t.Fatalf("error text %q", err)
	}
}

func writeAt(t *testing.T, p, s string, off int64) {
	t.Helper()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = w.WriteAt([]byte(s), off)
	must(t, err)
	must(t, w.Close())
}

func TestProbeWriters(t *testing.T) {
	p, f := newFile(t, "x")
	needLeases(t, f)
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	if got := ProbeWriters(f); got != WritersOpen {
		t.Fatalf("with a writer open: %v", got)
	}
	must(t, w.Close())
	if got := ProbeWriters(f); got != WritersNone {
		t.Fatalf("with the writer gone: %v", got)
	}
	// The lease was given back: opening for writing neither blocks nor fails.
	w, err = os.OpenFile(p, os.O_WRONLY|unix.O_NONBLOCK, 0)
	must(t, err)
	must(t, w.Close())
}

func TestStampOf(t *testing.T) {
	p, f := newFile(t, "hello")
	fi, err := f.Stat() // *syscall.Stat_t
	must(t, err)
	a, ok := StampOf(fi)
	if !ok || a.Size != 5 || a.Ino == 0 || a.Ctime.Sec == 0 {
		t.Fatalf("from os.File.Stat: %+v %v", a, ok)
	}
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	if b := stampOf(&st); b != a || !Unchanged(a, b) {
		t.Fatalf("from unix.Stat_t: %+v, want %+v", b, a)
	}
	b := a
	b.Ctime.Nsec++
	if Unchanged(a, b) {
		t.Fatal("a moved ctime went unseen")
	}
}

// A file at rest is judged on a second stat: no digest needed, nothing read again.
func TestCheckSettled(t *testing.T) {
	_, f := newFile(t, "at rest")
	needLeases(t, f)
	r, err := beginAt(f, "f.txt", time.Now().Add(coarseTick+20*time.Millisecond))
	must(t, err)
	if !r.Settled() {
		t.Fatal("a file unchanged for longer than a tick, with no writer, is not settled")
	}
	readAll(t, r, f)
	must(t, r.Check(context.Background(), 0, r.Info().Size(), nil))
}

func TestCheckStatChange(t *testing.T) {
	p, f := newFile(t, "0123456789")
	r, err := Begin(f, "f.txt")
	must(t, err)
	sum := readAll(t, r, f)
	writeAt(t, p, "more", 10)
	wantChanged(t, r.Check(context.Background(), 0, 10, sum), "f.txt", "size, times or inode")
}

// A file changed moments ago is read again: the same bytes pass, a torn first read does not.
func TestCheckRereadsJustChanged(t *testing.T) {
	_, f := newFile(t, "just written")
	r, err := Begin(f, "f.txt")
	must(t, err)
	if r.Settled() {
		t.Fatal("a file changed moments ago is settled")
	}
	sum := readAll(t, r, f)
	must(t, r.Check(context.Background(), 0, r.Info().Size(), sum))
	torn := sha256.Sum256([]byte("just wriXXXX"))
	wantChanged(t, r.Check(context.Background(), 0, r.Info().Size(), torn[:]), "f.txt", "second read differs")
	if err := r.Check(context.Background(), 0, r.Info().Size(), nil); err == nil || errors.As(err, new(*Error)) {
		t.Fatalf("a check that needs a digest and has none: %v", err)
	}
	// A section is checked as a section.
	part := sha256.Sum256([]byte("written"))
	must(t, r.Check(context.Background(), 5, 7, part[:]))
}

// Changed moments ago and still open for writing: the write may still be copying, and even two
// equal reads cannot prove otherwise.
func TestCheckRefusesWhileWritten(t *testing.T) {
	p, f := newFile(t, "being written")
	needLeases(t, f)
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	defer w.Close()
	r, err := Begin(f, "f.txt")
	must(t, err)
	sum := readAll(t, r, f)
	wantChanged(t, r.Check(context.Background(), 0, r.Info().Size(), sum), "f.txt", "open for writing")
}

// beginAged begins a read of f as if it began a little over settleTime after the file's last
// change: the age Check judges by, without waiting for it to pass.
func beginAged(f *os.File) (*Read, error) {
	return beginAt(f, "f.txt", time.Now().Add(settleTime+50*time.Millisecond))
}

// Open for writing but changed long ago (a log file held open, say): read again and compared.
func TestCheckRereadsHeldOpen(t *testing.T) {
	p, f := newFile(t, "held open")
	needLeases(t, f)
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	defer w.Close()
	r, err := beginAged(f)
	must(t, err)
	if r.Settled() {
		t.Fatal("a file held open for writing is settled")
	}
	sum := readAll(t, r, f)
	must(t, r.Check(context.Background(), 0, r.Info().Size(), sum))
	torn := sha256.Sum256([]byte("held OPEN"))
	wantChanged(t, r.Check(context.Background(), 0, r.Info().Size(), torn[:]), "f.txt", "second read differs")
}

func TestCheckShrunk(t *testing.T) {
	p, f := newFile(t, "0123456789")
	r, err := Begin(f, "f.txt")
	must(t, err)
	sum := readAll(t, r, f)
	// Truncating moves ctime, which the first stat comparison sees; a section past the end is
	// what a second read can see.
	must(t, os.Truncate(p, 4))
	wantChanged(t, r.Check(context.Background(), 0, 10, sum), "f.txt", "")
	r, err = Begin(f, "f.txt")
	must(t, err)
	wantChanged(t, r.Check(context.Background(), 0, 10, sum), "f.txt", "second read got 4 of 10 bytes")
}

// The whole mechanism against a writer that rewrites a file in place, one pwrite at a time:
// every read Check accepts is one whole version.
func TestReadsWhileRewrittenInPlace(t *testing.T) {
	const size = 4 << 20
	for _, keepOpen := range []bool{true, false} {
		p := filepath.Join(t.TempDir(), "hot.bin")
		rw := stablereadtest.Start(t, p, size, keepOpen)
		f, err := os.Open(p)
		must(t, err)
		var whole, refused int
		buf := make([]byte, size)
		for range 200 {
			r, err := Begin(f, "hot.bin")
			must(t, err)
			got := buf[:min(r.Info().Size(), size)]
			n, err := f.ReadAt(got, 0)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			sum := sha256.Sum256(got[:n])
			if err := r.Check(context.Background(), 0, int64(len(got)), sum[:]); err != nil {
				wantChanged(t, err, "hot.bin", "")
				refused++
				continue
			}
			if torn := rw.Torn(got); torn != "" {
				t.Errorf("accepted %s", torn)
				continue
			}
			whole++
		}
		gens, err := rw.Stop()
		must(t, err)
		f.Close()
		t.Logf("writer keeps the file open=%v: %d whole, %d refused, %d generations", keepOpen, whole, refused, gens)
	}
}
