package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

func TestProgressDrawsOnlyLargeTransfersAndThrottles(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(0, 0)
	p := newProgressTo(&out, "put big", func() time.Time { return clock })
	p.setTotal(8 << 20)
	for i := 0; i < 8; i++ {
		clock = clock.Add(10 * time.Millisecond) // 8 chunks within 100 ms: one draw
		p.add(1 << 20)
	}
	if got := strings.Count(out.String(), "\r\x1b[K"); got != 1 {
		t.Fatalf("want one draw within the throttle window, got %d: %q", got, out.String())
	}
	if !strings.Contains(out.String(), "put big  1.0/8.0 MiB   12%  100.0 MiB/s") {
		t.Fatalf("unexpected bar %q", out.String())
	}
	clock = clock.Add(progressEvery)
	p.add(0)
	if !strings.Contains(out.String(), "8.0/8.0 MiB  100%") {
		t.Fatalf("bar after the window: %q", out.String())
	}
	p.finish()
	if !strings.HasSuffix(out.String(), "\r\x1b[K") {
		t.Fatalf("finish must clear the line: %q", out.String())
	}
	cleared := out.Len()
	clock = clock.Add(time.Second)
	p.add(1 << 20) // a late report from the transport after the transfer ended
	if out.Len() != cleared {
		t.Fatalf("a finished bar drew again: %q", out.String()[cleared:])
	}

	// Small transfers draw nothing at all; a nil bar (stderr not a terminal) is a no-op.
	out.Reset()
	small := newProgressTo(&out, "get small", func() time.Time { return clock })
	small.read(1<<20, 1<<20)
	small.finish()
	var none *progress
	none.add(1)
	none.read(1, 1)
	none.setTotal(1)
	none.finish()
	if out.Len() != 0 {
		t.Fatalf("small transfer drew %q", out.String())
	}
}

func TestDisplayQuotesControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"plain.txt":        "plain.txt",
		"with space":       "with space",
		"naïve":            "naïve",
		"a\nb":             `"a\nb"`,
		"\x1b[2Jclear":     `"\x1b[2Jclear"`,
		"bad\xffutf8":      `"bad\xffutf8"`,
		"tab\there":        `"tab\there"`,
		"zero\u200bwidth!": `"zero\u200bwidth!"`,
	} {
		if got := display(in); got != want {
			t.Errorf("display(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestNoProgressUnlessStderrIsATerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, w := range map[string]io.Writer{"a buffer": &bytes.Buffer{}, "a pipe": pw, "a file": file} {
		c := &cli{stderr: w}
		if c.newProgress("x") != nil || c.startActivity("x") != nil {
			t.Errorf("stderr to %s got a progress line", name)
		}
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	c := &cli{stderr: tty}
	bar, act := c.newProgress("x"), c.startActivity("y")
	if bar == nil || act == nil {
		t.Fatalf("stderr to a terminal got no progress: %v %v", bar, act)
	}
	act.finish()
}

func TestActivityDrawsOnTicksAndClears(t *testing.T) {
	var out syncedBuffer
	clock := time.Unix(0, 0)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	tick := make(chan time.Time)
	a := newActivityTo(&out, "snapshot create w: capturing", now, tick)
	mu.Lock()
	clock = clock.Add(3 * time.Second)
	mu.Unlock()
	tick <- time.Time{} // received: the draw happens before the next receive
	tick <- time.Time{}
	a.finish()
	got := out.String()
	want := "\r\x1b[Ksnapshot create w: capturing  3s\r\x1b[Ksnapshot create w: capturing  3s\r\x1b[K"
	if got != want {
		t.Fatalf("activity drew %q; want %q", got, want)
	}
	// Finished before any tick: nothing at all.
	out.Reset()
	newActivityTo(&out, "quick", now, make(chan time.Time)).finish()
	if out.String() != "" {
		t.Fatalf("a quick call drew %q", out.String())
	}
	var none *activity
	none.finish()
}

type syncedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncedBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
