package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// progressMin is the smallest transfer that gets a progress bar: anything smaller is over before
// a bar would be worth reading.
const progressMin = 4 << 20

// progressEvery bounds redraws (10 a second), so a fast transfer does not spend its time on the
// terminal.
const progressEvery = 100 * time.Millisecond

// progress draws one line on stderr: bytes done of total, percent and throughput. A nil *progress
// does nothing, which is what a non-terminal stderr gets: logs and pipes stay clean.
type progress struct {
	mu     sync.Mutex // the HTTP transport reports upload progress from its own goroutine
	w      io.Writer
	label  string
	total  int64 // 0: unknown
	done   int64
	start  time.Time
	last   time.Time
	drawn  bool
	now    func() time.Time
	active bool // done or total passed progressMin
	closed bool // finished: late reports from the transport draw nothing
}

// newProgress returns a bar for c's stderr, or nil when stderr is not a terminal.
func (c *cli) newProgress(label string) *progress {
	f, ok := c.stderr.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return newProgressTo(f, label, time.Now)
}

// stdoutIsTerminal reports whether output goes to a terminal, where a bar would tangle with it.
func (c *cli) stdoutIsTerminal() bool {
	f, ok := c.stdout.(*os.File)
	return ok && isTerminal(f)
}

func newProgressTo(w io.Writer, label string, now func() time.Time) *progress {
	return &progress{w: w, label: label, now: now, start: now()}
}

// isTerminal is x/term's IsTerminal for Linux: TCGETS succeeds only on a tty.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (p *progress) setTotal(total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = total
}

// read is client.ReadOptions.Progress: the total once, then each chunk.
func (p *progress) read(total, n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.total = total
	p.mu.Unlock()
	p.add(n)
}

// add counts n more bytes and redraws when the last draw is old enough.
func (p *progress) add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.closed {
		return
	}
	if !p.active && (p.total > progressMin || p.done > progressMin) {
		p.active = true
	}
	if !p.active {
		return
	}
	now := p.now()
	if p.drawn && now.Sub(p.last) < progressEvery {
		return
	}
	p.last, p.drawn = now, true
	fmt.Fprint(p.w, "\r\x1b[K"+p.line(now))
}

// line renders the bar's text.
func (p *progress) line(now time.Time) string {
	const mib = 1 << 20
	rate := 0.0
	if secs := now.Sub(p.start).Seconds(); secs > 0 {
		rate = float64(p.done) / mib / secs
	}
	if p.total <= 0 {
		return fmt.Sprintf("%s  %.1f MiB  %.1f MiB/s", p.label, float64(p.done)/mib, rate)
	}
	pct := float64(p.done) * 100 / float64(p.total)
	return fmt.Sprintf("%s  %.1f/%.1f MiB  %3.0f%%  %.1f MiB/s", p.label, float64(p.done)/mib, float64(p.total)/mib, pct, rate)
}

// finish clears the bar's line, leaving the terminal as it was.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	p.drawn, p.closed = false, true
}

// activityAfter is how long a call the CLI sees no bytes of runs before a line says it is still
// going: a capture of a small tree is over before then and draws nothing.
const activityAfter = time.Second

// activity draws "label  12s" on a terminal while the controller does work whose bytes the CLI
// never sees (a capture goes from the runner to the blob store, a restore back): there is no
// count to show honestly, only that it is still going and for how long. A nil *activity, what a
// non-terminal stderr gets, does nothing.
type activity struct {
	w     io.Writer
	label string
	start time.Time
	now   func() time.Time
	drawn bool
	stop  chan struct{}
	done  chan struct{}
}

// startActivity starts the line on c's stderr when it is a terminal; stop it with finish.
func (c *cli) startActivity(label string) *activity {
	f, ok := c.stderr.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	t := time.NewTicker(activityAfter)
	a := newActivityTo(f, label, time.Now, t.C)
	go func() {
		<-a.done
		t.Stop()
	}()
	return a
}

// newActivityTo draws on w at each tick until finish.
func newActivityTo(w io.Writer, label string, now func() time.Time, tick <-chan time.Time) *activity {
	a := &activity{w: w, label: label, now: now, start: now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			select {
			case <-a.stop:
				return
			case <-tick:
				a.drawn = true
				fmt.Fprintf(a.w, "\r\x1b[K%s  %s", a.label, a.now().Sub(a.start).Round(time.Second))
			}
		}
	}()
	return a
}

// finish stops the line and clears it; nothing is drawn after it returns.
func (a *activity) finish() {
	if a == nil {
		return
	}
	close(a.stop)
	<-a.done
	if a.drawn {
		fmt.Fprint(a.w, "\r\x1b[K")
	}
}
