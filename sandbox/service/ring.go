package service

import (
	"context"
	"errors"
	"sync"
)

// ErrOverrun ends a Follow whose reader fell more than a whole ring behind: the bytes it had not
// read yet were overwritten. The reader learns where the log resumes from its next read, so a
// gap is always said, never silently skipped.
var ErrOverrun = errors.New("the log ring overwrote bytes before they were read")

// Ring is a bounded log with absolute byte offsets: offset 0 is the first byte ever written, and
// the ring keeps the last size bytes. Readers that remember an offset resume exactly there, or at
// the ring's start when that byte has already been dropped.
type Ring struct {
	mu     sync.Mutex
	data   []byte
	end    int64 // absolute offset one past the newest byte
	closed bool
	notify chan struct{} // closed and replaced on every write and on Close
}

// NewRing makes a ring holding at most size bytes.
func NewRing(size int) *Ring {
	if size <= 0 {
		size = DefaultLogBytes
	}
	return &Ring{data: make([]byte, size), notify: make(chan struct{})}
}

// Write appends p. It never fails, so a process writing its output is never blocked or broken.
func (r *Ring) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := int64(len(r.data))
	if int64(len(p)) > size {
		r.end += int64(len(p)) - size
		p = p[len(p)-int(size):]
	}
	for len(p) > 0 {
		i := r.end % size
		c := copy(r.data[i:], p)
		p = p[c:]
		r.end += int64(c)
	}
	close(r.notify)
	r.notify = make(chan struct{})
	return n, nil
}

// Close marks the end of the log: readers drain what is left and stop waiting.
func (r *Ring) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.notify)
	}
}

func (r *Ring) start() int64 { return max(0, r.end-int64(len(r.data))) }

// Bounds returns the oldest offset still held and the offset one past the newest byte.
func (r *Ring) Bounds() (start, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.start(), r.end
}

// Read returns up to limit bytes from off. from is where the bytes really start (off moved up to
// the ring's start when older bytes were dropped, or down to the end when off is past it). wait
// is closed when more bytes arrive or the ring closes; closed says no more bytes will come.
func (r *Ring) Read(off int64, limit int) (p []byte, from int64, wait <-chan struct{}, closed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from = min(max(off, r.start()), r.end)
	n := min(r.end-from, int64(limit))
	p = make([]byte, 0, n)
	size := int64(len(r.data))
	for o := from; o < from+n; {
		i := o % size
		chunk := min(size-i, from+n-o)
		p = append(p, r.data[i:i+chunk]...)
		o += chunk
	}
	return p, from, r.notify, r.closed
}

// Follow delivers the log from off in order: start is called once with the offset the bytes
// really start at, then fn with consecutive chunks. Without follow it stops at the end present
// now; with follow it waits for more until the ring is closed and drained or ctx ends. It returns
// the offset one past the last byte delivered, and ErrOverrun when the next bytes to deliver
// were already overwritten.
func (r *Ring) Follow(ctx context.Context, off int64, follow bool, start func(from int64) error, fn func(p []byte) error) (int64, error) {
	const chunk = 256 << 10
	p, from, wait, closed := r.Read(off, chunk)
	if err := start(from); err != nil {
		return from, err
	}
	_, stopAt := r.Bounds()
	next := from
	for {
		if len(p) > 0 {
			if from > next {
				return next, ErrOverrun
			}
			if err := fn(p); err != nil {
				return next, err
			}
			next = from + int64(len(p))
		}
		if !follow && next >= stopAt {
			return next, nil
		}
		if len(p) == 0 {
			if closed {
				return next, nil
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return next, ctx.Err()
			}
		}
		p, from, wait, closed = r.Read(next, chunk)
	}
}
