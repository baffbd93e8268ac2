package runlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readAll reads a stream from off to its current end, returning the bytes and the gaps met.
func readAll(t *testing.T, l *Log, name string, off int64) ([]byte, []Gap) {
	t.Helper()
	var out []byte
	var gaps []Gap
	buf := make([]byte, 7) // small: reads cross segment boundaries
	for {
		r, err := l.Read(name, off, buf)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Gap != nil:
			gaps = append(gaps, *r.Gap)
			off = r.Gap.To
		case r.N > 0:
			out = append(out, buf[:r.N]...)
			off += int64(r.N)
		default:
			return out, gaps
		}
	}
}

func TestOffsets(t *testing.T) {
	s := NewStore(t.TempDir(), Options{SegmentBytes: 10})
	defer s.Close()
	l, err := s.Create("stdout", "stderr")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := range 20 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		if _, err := l.Write("stdout", []byte(line)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Write("stderr", []byte("e")); err != nil {
			t.Fatal(err)
		}
	}
	for _, off := range []int64{0, 1, 9, 10, 11, 57, int64(want.Len())} {
		got, gaps := readAll(t, l, "stdout", off)
		if len(gaps) != 0 || !bytes.Equal(got, want.Bytes()[off:]) {
			t.Fatalf("from %d: %q, gaps %v", off, got, gaps)
		}
	}
	if start, end := l.Bounds("stderr"); start != 0 || end != 20 {
		t.Fatalf("stderr bounds [%d, %d)", start, end)
	}
	if _, err := l.Read("stdout", int64(want.Len())+1, make([]byte, 4)); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("read past the end: %v", err)
	}
	if s.Used() != int64(want.Len())+20 {
		t.Fatalf("used %d", s.Used())
	}
}

// Under a tight per-run bound the oldest segments go first, and a reader below Start is told
// exactly the range it missed, then given every byte still held.
func TestGapsUnderTightBound(t *testing.T) {
	s := NewStore(t.TempDir(), Options{MaxRunBytes: 64, SegmentBytes: 16})
	defer s.Close()
	l, err := s.Create("stdout", "stderr")
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for i := range 50 {
		p := []byte(fmt.Sprintf("%02d|", i))
		all = append(all, p...)
		if _, err := l.Write("stdout", p); err != nil {
			t.Fatal(err)
		}
		if l.held > 64 {
			t.Fatalf("log holds %d bytes, bound 64", l.held)
		}
	}
	start, end := l.Bounds("stdout")
	if end != int64(len(all)) || start == 0 || start%16 != 0 || end-start > 64 {
		t.Fatalf("bounds [%d, %d) of %d written", start, end, len(all))
	}
	got, gaps := readAll(t, l, "stdout", 5)
	if len(gaps) != 1 || gaps[0] != (Gap{From: 5, To: start}) {
		t.Fatalf("gaps %v; want [5, %d)", gaps, start)
	}
	if !bytes.Equal(got, all[start:]) {
		t.Fatalf("held %q; want %q", got, all[start:])
	}
	entries, err := os.ReadDir(l.dir)
	if err != nil || len(entries) != len(l.streams["stdout"].segs) {
		t.Fatalf("%d files for %d segments (%v)", len(entries), len(l.streams["stdout"].segs), err)
	}
}

// A writer and several followers at once: each follower gets every byte once, in order,
// waiting on the log's change channel, and ends when the log closes.
func TestConcurrentWriterAndFollowers(t *testing.T) {
	s := NewStore(t.TempDir(), Options{SegmentBytes: 4096})
	defer s.Close()
	l, err := s.Create("stdout", "stderr")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	want := sha256.Sum256(data)
	var wg sync.WaitGroup
	sums := make([][32]byte, 4)
	errs := make([]error, 4)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			buf := make([]byte, 1000+i*777)
			var off int64
			for {
				r, err := l.Read("stdout", off, buf)
				if err != nil {
					errs[i] = err
					return
				}
				switch {
				case r.Gap != nil:
					errs[i] = fmt.Errorf("gap %v under no bound", *r.Gap)
					return
				case r.N > 0:
					h.Write(buf[:r.N])
					off += int64(r.N)
				case r.Closed:
					copy(sums[i][:], h.Sum(nil))
					return
				default:
					<-r.Wait
				}
			}
		}()
	}
	for p := data; len(p) > 0; {
		n := min(len(p), 1+rand.IntN(9000))
		if _, err := l.Write("stdout", p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	l.Close()
	wg.Wait()
	for i := range sums {
		if errs[i] != nil || sums[i] != want {
			t.Fatalf("follower %d: %v, sum differs: %v", i, errs[i], sums[i] != want)
		}
	}
}

// The per-sandbox budget drops finished logs' bytes first, oldest first, and only then a
// running log's.
func TestBudgetAcrossRuns(t *testing.T) {
	s := NewStore(t.TempDir(), Options{MaxRunBytes: 64, MaxTotalBytes: 128, SegmentBytes: 16})
	defer s.Close()
	mk := func() *Log {
		l, err := s.Create("stdout", "stderr")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fill := func(l *Log, n int) {
		if _, err := l.Write("stdout", bytes.Repeat([]byte("x"), n)); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := mk(), mk(), mk()
	fill(a, 64)
	fill(b, 64)
	a.Close()
	b.Close()
	fill(c, 32) // 160 > 128: a (oldest finished) loses 32, b keeps all
	if a.held != 32 || b.held != 64 || c.held != 32 || s.Used() > 128 {
		t.Fatalf("held a=%d b=%d c=%d used=%d", a.held, b.held, c.held, s.Used())
	}
	fill(c, 32) // a gives its last 32
	if a.held != 0 || b.held != 64 || c.held != 64 {
		t.Fatalf("held a=%d b=%d c=%d", a.held, b.held, c.held)
	}
	if start, end := a.Bounds("stdout"); start != 64 || end != 64 {
		t.Fatalf("a bounds [%d, %d)", start, end)
	}
	d := mk()
	fill(d, 64) // b (finished) goes before c (running)
	if b.held != 0 || c.held != 64 || d.held != 64 {
		t.Fatalf("held b=%d c=%d d=%d", b.held, c.held, d.held)
	}
	e := mk()
	fill(e, 32) // only running logs left: the oldest, c, pays
	if c.held != 32 || d.held != 64 || e.held != 32 || s.Used() != 128 {
		t.Fatalf("held c=%d d=%d e=%d used=%d", c.held, d.held, e.held, s.Used())
	}
	a.Remove()
	if _, err := os.Stat(a.dir); !os.IsNotExist(err) {
		t.Fatalf("removed log's directory: %v", err)
	}
}

// A store without a directory makes a private one and removes it on Close.
func TestOwnDirectory(t *testing.T) {
	s := NewStore("", Options{})
	l, err := s.Create("stdout")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write("stdout", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir %v %v", fi, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("store dir left: %v", err)
	}
}
