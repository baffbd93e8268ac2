package watch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/jonboulle/clockwork"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/staging"
	"golang.org/x/sys/unix"
)

// Defaults of Options.
const (
	// DefaultMaxWatches bounds the directories one watch holds (the kernel's own default per
	// user is 8192 on older systems; each costs about 1 KiB of kernel memory).
	DefaultMaxWatches = 8192
	// DefaultQueueLen bounds the events waiting to be sent: with paths up to PATH_MAX, at most a
	// few MiB in practice.
	DefaultQueueLen = 8192
)

// mask is what every watch asks for. IN_DONT_FOLLOW is not among the flags: the watched path is
// /proc/self/fd/N, a magic link that must be followed to reach the directory the guard opened
// (with IN_DONT_FOLLOW, the kernel would watch the link itself and refuse it as not a
// directory); no other link is ever on the path.
const mask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// eventHeader is the size of struct inotify_event before its name.
const eventHeader = unix.SizeofInotifyEvent

// Options configure a Watcher.
type Options struct {
	// Recursive watches every directory beneath the watched one too, and directories as they
	// appear.
	Recursive bool
	// MaxWatches bounds the directories watched; 0 is DefaultMaxWatches.
	MaxWatches int
	// QueueLen bounds the events waiting to be read from Events; 0 is DefaultQueueLen, and it is
	// at least 2 (one slot is kept for the overflow event).
	QueueLen int
	// Clock stamps events; nil is the real clock.
	Clock clockwork.Clock
}

// ErrGone ends a watch whose directory was removed or moved away.
var ErrGone = protocol.Errorf(protocol.CodeNotFound, "the watched directory was removed or moved away")

// Watcher watches one directory (and, recursively, those beneath it).
type Watcher struct {
	root  *fsguard.Root
	top   string
	opts  Options
	clock clockwork.Clock

	ino    *os.File // the inotify instance, non-blocking: Read waits in Go's poller, Close ends it
	rc     syscall.RawConn
	closed atomic.Bool

	// Owned by the goroutine running Start, then by Run's.
	dirs     map[int32]string // watch descriptor → the directory's workspace-relative path
	byDir    map[string]int32
	topWD    int32
	pending  *move // a MOVED_FROM waiting for its MOVED_TO
	dropping bool  // the queue overflowed and has not drained to half yet
	limitHit bool

	events chan protocol.WatchEvent
}

// move is the first half of a rename.
type move struct {
	cookie   uint32
	path     string
	isDir    bool
	reserved bool
}

// Start watches the directory rel of root. root must stay open while the Watcher runs. A path
// that is missing, not a directory, a symlink or outside the root is refused with the guard's
// error, before anything is watched.
func Start(root *fsguard.Root, rel string, opts Options) (*Watcher, error) {
	clean, err := fsguard.Clean(rel)
	if err != nil {
		return nil, err
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	opts.QueueLen = max(opts.QueueLen, 2)
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{root: root, top: clean, opts: opts, clock: opts.Clock,
		ino: os.NewFile(uintptr(fd), "inotify"), dirs: map[int32]string{}, byDir: map[string]int32{},
		events: make(chan protocol.WatchEvent, opts.QueueLen)}
	if w.rc, err = w.ino.SyscallConn(); err != nil {
		w.Close()
		return nil, fmt.Errorf("inotify: %w", err)
	}
	sub, wd, err := w.watchDir(clean)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.topWD = wd
	if opts.Recursive {
		subdirs := w.list(sub, clean, false)
		sub.Close()
		w.walk(subdirs, false)
	} else {
		sub.Close()
	}
	return w, nil
}

// Path is the watched directory, clean.
func (w *Watcher) Path() string { return w.top }

// Watches is how many directories are watched. Call it before Run.
func (w *Watcher) Watches() int { return len(w.dirs) }

// Events delivers the events; it is closed when Run returns.
func (w *Watcher) Events() <-chan protocol.WatchEvent { return w.events }

// Close stops the watch: Run returns. It may be called more than once, from any goroutine.
func (w *Watcher) Close() {
	if w.closed.CompareAndSwap(false, true) {
		w.ino.Close()
	}
}

// Run reads the kernel's events until ctx ends or Close (nil), or the watched directory is
// gone (ErrGone); Events is closed when it returns. Run never waits for the reader of Events:
// a full queue drops events and says so with one overflow event.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.events)
	defer w.Close()
	stop := context.AfterFunc(ctx, w.Close)
	defer stop()
	buf := make([]byte, readBuf)
	for {
		if err := w.readOnce(buf); err != nil {
			if w.closed.Load() {
				return nil
			}
			return err
		}
	}
}

// readBuf is the size of one read of the kernel's events.
const readBuf = 64 << 10

// readOnce reads what the kernel has queued (waiting for something) and handles it.
func (w *Watcher) readOnce(buf []byte) error {
	n, err := w.ino.Read(buf)
	if err != nil {
		return fmt.Errorf("read inotify: %w", err)
	}
	// The two halves of a rename are queued together, so only a read that filled the buffer
	// may have split them: otherwise a lone MOVED_FROM at the end is final.
	split := n > len(buf)-(eventHeader+unix.NAME_MAX+1)
	return w.handle(buf[:n], split)
}

// handle decodes and handles one read of the kernel's events.
func (w *Watcher) handle(buf []byte, split bool) error {
	for len(buf) >= eventHeader {
		wd := int32(binary.NativeEndian.Uint32(buf[0:]))
		m := binary.NativeEndian.Uint32(buf[4:])
		cookie := binary.NativeEndian.Uint32(buf[8:])
		n := int(binary.NativeEndian.Uint32(buf[12:]))
		if eventHeader+n > len(buf) {
			return fmt.Errorf("read inotify: truncated event")
		}
		name := string(buf[eventHeader : eventHeader+n])
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		buf = buf[eventHeader+n:]
		if err := w.one(wd, m, cookie, name); err != nil {
			return err
		}
	}
	if !split {
		w.flushMove()
	}
	return nil
}

// one handles one kernel event.
func (w *Watcher) one(wd int32, m, cookie uint32, name string) error {
	if m&unix.IN_MOVED_TO == 0 {
		w.flushMove()
	}
	if m&unix.IN_Q_OVERFLOW != 0 {
		w.overflow("", "the kernel's event queue overflowed")
		return nil
	}
	dir, ok := w.dirs[wd]
	if !ok {
		return nil // a watch already dropped (its directory left the tree)
	}
	if m&unix.IN_IGNORED != 0 {
		w.untrack(wd)
		if wd == w.topWD {
			return ErrGone
		}
		return nil
	}
	isDir := m&unix.IN_ISDIR != 0
	if name == "" {
		// The watched directory itself. Beneath the top, the parent's watch reports it by name.
		if wd != w.topWD {
			return nil
		}
		switch {
		case m&unix.IN_ATTRIB != 0:
			w.push(protocol.WatchEvent{Type: protocol.WatchChmod, Path: w.top, IsDir: true})
		case m&unix.IN_DELETE_SELF != 0:
			w.push(protocol.WatchEvent{Type: protocol.WatchRemove, Path: w.top, IsDir: true})
		case m&unix.IN_MOVE_SELF != 0:
			// Its new name is unknown (perhaps outside the workspace): what follows could not
			// be named, so the watch ends.
			w.push(protocol.WatchEvent{Type: protocol.WatchRemove, Path: w.top, IsDir: true})
			return ErrGone
		}
		return nil
	}
	p := path.Join(dir, name)
	res := Reserved(name)
	if res && m&unix.IN_MOVED_FROM == 0 {
		return nil // Tether's own temporaries: what they become is reported
	}
	switch {
	case m&unix.IN_CREATE != 0:
		w.push(protocol.WatchEvent{Type: protocol.WatchCreate, Path: p, IsDir: isDir})
		if isDir && w.opts.Recursive {
			w.walk([]string{p}, true)
		}
	case m&unix.IN_MODIFY != 0:
		w.push(protocol.WatchEvent{Type: protocol.WatchWrite, Path: p, IsDir: isDir})
	case m&unix.IN_ATTRIB != 0:
		w.push(protocol.WatchEvent{Type: protocol.WatchChmod, Path: p, IsDir: isDir})
	case m&unix.IN_DELETE != 0:
		w.push(protocol.WatchEvent{Type: protocol.WatchRemove, Path: p, IsDir: isDir})
	case m&unix.IN_MOVED_FROM != 0:
		w.pending = &move{cookie: cookie, path: p, isDir: isDir, reserved: res}
	case m&unix.IN_MOVED_TO != 0:
		from := w.pending
		w.pending = nil
		if from == nil || from.cookie != cookie {
			w.flushMoveOf(from)
			// Moved in from outside the watched tree: new here.
			w.push(protocol.WatchEvent{Type: protocol.WatchCreate, Path: p, IsDir: isDir})
			if isDir && w.opts.Recursive {
				w.walk([]string{p}, true)
			}
			return nil
		}
		if isDir && w.opts.Recursive {
			w.renameDirs(from.path, p)
		}
		if from.reserved {
			// Tether's own write or import publishing its result.
			w.push(protocol.WatchEvent{Type: protocol.WatchCreate, Path: p, IsDir: isDir})
			return nil
		}
		w.push(protocol.WatchEvent{Type: protocol.WatchRename, Path: p, OldPath: from.path, IsDir: isDir})
	}
	return nil
}

// flushMove ends a pending MOVED_FROM whose MOVED_TO did not come: the entry left the watched
// tree, so here it is removed.
func (w *Watcher) flushMove() {
	from := w.pending
	w.pending = nil
	w.flushMoveOf(from)
}

func (w *Watcher) flushMoveOf(from *move) {
	if from == nil || from.reserved {
		return
	}
	if from.isDir {
		w.unwatchUnder(from.path)
	}
	w.push(protocol.WatchEvent{Type: protocol.WatchRemove, Path: from.path, IsDir: from.isDir})
}

// push queues ev without ever waiting. When only the last slot is left, an overflow event takes
// it and events are dropped until the reader has taken half the queue. Only the goroutine
// running Run (or Start) sends, so the length checked is never less when the send happens.
func (w *Watcher) push(ev protocol.WatchEvent) {
	if w.dropping {
		if len(w.events) > cap(w.events)/2 {
			return
		}
		w.dropping = false
	}
	ev.Time = w.clock.Now().UTC()
	if len(w.events) >= cap(w.events)-1 {
		w.dropping = true
		ev = protocol.WatchEvent{Type: protocol.WatchOverflow, Time: ev.Time,
			Reason: fmt.Sprintf("more than %d events waiting to be sent: events were dropped", cap(w.events)-1)}
	}
	w.events <- ev
}

// overflow reports events lost for another reason than the queue (the kernel's queue, the
// watch bound).
func (w *Watcher) overflow(p, reason string) {
	w.push(protocol.WatchEvent{Type: protocol.WatchOverflow, Path: p, Reason: reason})
}

// Reserved reports whether a name is one Tether gives its own temporary files and staging
// directories: they are never reported, nor watched.
func Reserved(name string) bool {
	return strings.HasPrefix(name, fsguard.TempPrefix) || strings.HasPrefix(name, staging.Prefix)
}

// errLimit refuses a watch past the bound.
var errLimit = errors.New("watch limit")
