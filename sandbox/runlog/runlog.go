package runlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Default bounds.
const (
	DefaultMaxRunBytes   = 128 << 20
	DefaultMaxTotalBytes = 1 << 30
	DefaultSegmentBytes  = 4 << 20
)

// Options bound a Store's logs; zero fields take the defaults.
type Options struct {
	MaxRunBytes   int64 // held per log, all its streams together
	MaxTotalBytes int64 // held by all the store's logs together
	SegmentBytes  int64 // one segment file at most (and at most a quarter of MaxRunBytes)
}

// ErrBeyondEnd is returned by Read for an offset past what the stream ever held.
var ErrBeyondEnd = errors.New("runlog: offset past the end of the stream")

// Gap says bytes [From, To) of a stream are no longer held.
type Gap struct{ From, To int64 }

// Store makes logs in one directory and bounds them together. One mutex guards every log of
// the store: the per-sandbox budget moves bytes between logs, and a write is a copy into the
// page cache, short enough to hold it for.
type Store struct {
	opts    Options
	segSize int64

	mu      sync.Mutex
	dir     string // "" until the first log when the store makes its own
	ownDir  bool   // dir is a temporary directory the store made and removes on Close
	seq     uint64 // names log directories and orders segments by age
	logs    []*Log // in creation order
	used    int64  // bytes held by all logs
	removed bool
}

// NewStore keeps logs under dir, which must be private to the caller. An empty dir makes the
// store use a private (0700) temporary directory of its own, created with the first log (so
// with the file ids the caller has then) and removed by Close.
func NewStore(dir string, opts Options) *Store {
	if opts.MaxRunBytes <= 0 {
		opts.MaxRunBytes = DefaultMaxRunBytes
	}
	if opts.MaxTotalBytes <= 0 {
		opts.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	// At least four segments per run: dropping one whole segment then frees at most a quarter
	// of a run's budget, never everything it holds.
	seg := max(1, min(opts.SegmentBytes, opts.MaxRunBytes/4))
	return &Store{opts: opts, segSize: seg, dir: dir}
}

// Create makes an empty log with the given streams.
func (s *Store) Create(streams ...string) (*Log, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return nil, errors.New("runlog: store closed")
	}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "tether-run-logs-")
		if err != nil {
			return nil, fmt.Errorf("runlog: %w", err)
		}
		s.dir, s.ownDir = d, true
	}
	s.seq++
	dir := filepath.Join(s.dir, strconv.FormatUint(s.seq, 10))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("runlog: %w", err)
	}
	l := &Log{store: s, dir: dir, streams: map[string]*stream{}, changed: make(chan struct{})}
	for _, name := range streams {
		if name == "" || filepath.Base(name) != name || name[0] == '.' {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("runlog: bad stream name %q", name)
		}
		l.streams[name] = &stream{name: name}
	}
	s.logs = append(s.logs, l)
	return l, nil
}

// Close removes every log, and the directory when the store made it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = true
	for _, l := range s.logs {
		l.removeLocked()
	}
	s.logs = nil
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// Used is how many bytes all the store's logs hold.
func (s *Store) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// enforce drops segments until l fits its run budget and all logs the store's budget.
func (s *Store) enforce(l *Log) {
	for l.held > s.opts.MaxRunBytes {
		l.dropOldest()
	}
	for s.used > s.opts.MaxTotalBytes {
		victim := s.victim()
		if victim == nil {
			return
		}
		victim.dropOldest()
	}
}

// victim is the log to drop from for the store's budget: the oldest finished one still holding
// bytes, else the oldest running one.
func (s *Store) victim() *Log {
	var running *Log
	for _, l := range s.logs {
		if l.held == 0 {
			continue
		}
		if l.closed {
			return l
		}
		if running == nil {
			running = l
		}
	}
	return running
}

// Log is one run's output.
type Log struct {
	store   *Store
	dir     string
	streams map[string]*stream
	held    int64
	closed  bool
	gone    bool
	// changed is closed (and replaced) on every append and on Close: followers wait on it
	// instead of polling.
	changed chan struct{}
}

type stream struct {
	name       string
	start, end int64
	segs       []*segment // oldest first; the last one is written to while active is set
	active     *os.File
}

type segment struct {
	start, size int64
	seq         uint64 // its age among all the store's segments
}

func (st *stream) path(dir string, start int64) string {
	return filepath.Join(dir, fmt.Sprintf("%s.%020d", st.name, start))
}

// Write appends p to the stream. The bytes always count: when the file cannot take them (a full
// disk), everything the stream held before is dropped and reported as a gap, never a hole in
// the middle of what a reader is given.
func (l *Log) Write(name string, p []byte) (int, error) {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := l.streams[name]
	if !ok || l.closed || l.gone {
		return 0, fmt.Errorf("runlog: write to stream %q of a closed log or no such stream", name)
	}
	total := len(p)
	var werr error
	for len(p) > 0 {
		if err := l.ensureActive(st); err != nil {
			werr = err
			l.lose(st, int64(len(p)))
			break
		}
		seg := st.segs[len(st.segs)-1]
		n := int(min(int64(len(p)), s.segSize-seg.size))
		if _, err := st.active.Write(p[:n]); err != nil {
			werr = err
			l.lose(st, int64(len(p)))
			break
		}
		seg.size += int64(n)
		st.end += int64(n)
		l.held += int64(n)
		s.used += int64(n)
		p = p[n:]
		if seg.size == s.segSize {
			st.active.Close()
			st.active = nil
		}
		s.enforce(l)
	}
	l.notify()
	if werr != nil {
		return total, fmt.Errorf("runlog: %w", werr)
	}
	return total, nil
}

// ensureActive gives st a segment to write to.
func (l *Log) ensureActive(st *stream) error {
	if st.active != nil {
		return nil
	}
	f, err := os.OpenFile(st.path(l.dir, st.end), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	l.store.seq++
	st.active = f
	st.segs = append(st.segs, &segment{start: st.end, seq: l.store.seq})
	return nil
}

// lose counts n bytes that could not be kept and drops everything before them.
func (l *Log) lose(st *stream, n int64) {
	for len(st.segs) > 0 {
		l.dropFirst(st)
	}
	st.end += n
	st.start = st.end
}

// dropOldest drops the oldest segment of any of l's streams.
func (l *Log) dropOldest() {
	var oldest *stream
	for _, st := range l.streams {
		if len(st.segs) > 0 && (oldest == nil || st.segs[0].seq < oldest.segs[0].seq) {
			oldest = st
		}
	}
	if oldest != nil {
		l.dropFirst(oldest)
	}
}

func (l *Log) dropFirst(st *stream) {
	seg := st.segs[0]
	if len(st.segs) == 1 && st.active != nil {
		st.active.Close()
		st.active = nil
	}
	os.Remove(st.path(l.dir, seg.start))
	st.segs = st.segs[1:]
	st.start = seg.start + seg.size
	l.held -= seg.size
	l.store.used -= seg.size
}

func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Writer is an io.Writer appending to one stream.
func (l *Log) Writer(name string) io.Writer { return writer{l, name} }

type writer struct {
	l    *Log
	name string
}

func (w writer) Write(p []byte) (int, error) { return w.l.Write(w.name, p) }

// Close ends the log: no more writes, and followers learn they have everything.
func (l *Log) Close() {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for _, st := range l.streams {
		if st.active != nil {
			st.active.Close()
			st.active = nil
		}
	}
	l.notify()
}

// Remove closes the log and drops its files.
func (l *Log) Remove() {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	l.removeLocked()
	for i, o := range s.logs {
		if o == l {
			s.logs = append(s.logs[:i], s.logs[i+1:]...)
			break
		}
	}
}

func (l *Log) removeLocked() {
	if l.gone {
		return
	}
	for _, st := range l.streams {
		for len(st.segs) > 0 {
			l.dropFirst(st)
		}
	}
	l.gone = true
	if !l.closed {
		l.closed = true
		l.notify()
	}
	os.RemoveAll(l.dir)
}

// Changed returns a channel closed on the next append to any stream or on Close.
func (l *Log) Changed() <-chan struct{} {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	return l.changed
}

// Closed says the log takes no more writes.
func (l *Log) Closed() bool {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	return l.closed
}

// Bounds returns the stream's [start, end): the bytes still held, end being all ever written.
func (l *Log) Bounds(name string) (start, end int64) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if st, ok := l.streams[name]; ok {
		return st.start, st.end
	}
	return 0, 0
}

// Result is what one Read found.
type Result struct {
	N int // bytes copied, from the offset asked for
	// Gap, when set, says the bytes from the offset asked for up to Gap.To are no longer held;
	// the next read starts at Gap.To.
	Gap *Gap
	// At the end of the stream (N == 0, no gap): Closed says nothing more will come; otherwise
	// Wait is closed when something was appended or the log closed.
	Closed bool
	Wait   <-chan struct{}
}

// Read copies bytes of stream name from offset off into p.
func (l *Log) Read(name string, off int64, p []byte) (Result, error) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	st, ok := l.streams[name]
	if !ok {
		return Result{}, fmt.Errorf("runlog: no stream %q", name)
	}
	switch {
	case off < 0 || off > st.end:
		return Result{}, fmt.Errorf("%w: %d (it ends at %d)", ErrBeyondEnd, off, st.end)
	case off < st.start:
		return Result{Gap: &Gap{From: off, To: st.start}}, nil
	case off == st.end:
		return Result{Closed: l.closed, Wait: l.changed}, nil
	}
	for i, seg := range st.segs {
		if off >= seg.start+seg.size {
			continue
		}
		n := min(int64(len(p)), seg.start+seg.size-off)
		f := st.active
		if f == nil || i != len(st.segs)-1 {
			var err error
			if f, err = os.Open(st.path(l.dir, seg.start)); err != nil {
				return Result{}, fmt.Errorf("runlog: %w", err)
			}
			defer f.Close()
		}
		got, err := f.ReadAt(p[:n], off-seg.start)
		if got == 0 && err != nil {
			return Result{}, fmt.Errorf("runlog: %w", err)
		}
		return Result{N: got}, nil
	}
	return Result{}, fmt.Errorf("runlog: offset %d of %q not in any segment", off, name)
}
