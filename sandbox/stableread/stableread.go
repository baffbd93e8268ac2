package stableread

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Code is the wire error code of a read that was not of one version of the file.
const Code = "changed_during_capture"

// Error says that a file changed while it was read. It carries Code for the runner's and the
// client's error mapping (ErrorCode).
type Error struct {
	Path   string // the path as the caller named it
	Reason string // what gave the change away
}

func (e *Error) Error() string { return Code + ": " + e.Path + ": " + e.Reason }

// ErrorCode is how other packages read the code without importing this one.
func (e *Error) ErrorCode() string { return Code }

func changed(path, reason string) *Error { return &Error{Path: path, Reason: reason} }

// coarseTick covers the coarsest timestamp clock (a jiffy at HZ=100 is 10 ms, with margin): two
// writes within one tick of such a clock can leave a file's times unchanged.
const coarseTick = 100 * time.Millisecond

// settleTime is how long a single write(2) may plausibly stay in progress (dirty-page throttling
// can stall one for a while). A file still open for writing whose last change is more recent
// than this cannot be read as one version.
const settleTime = time.Second

// Stamp is what changes when a file's content may have: identity, size and times. ctime matters
// most, since no caller can set it back. Mode is the raw st_mode, kept for callers that archive
// it; Unchanged ignores it (a chmod moves ctime).
type Stamp struct {
	Dev, Ino     uint64
	Mode         uint32
	Size         int64
	Mtime, Ctime unix.Timespec
}

// StampOf reads a FileInfo's stat record. os.File.Stat carries a *syscall.Stat_t and the guard's
// Lstat a *unix.Stat_t; asserting only one of them once made every comparison fall back to size
// and mtime without saying so, hence the ok result.
func StampOf(fi fs.FileInfo) (Stamp, bool) {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return Stamp{uint64(st.Dev), st.Ino, st.Mode, st.Size, unix.Timespec(st.Mtim), unix.Timespec(st.Ctim)}, true
	case *unix.Stat_t:
		return stampOf(st), true
	}
	return Stamp{}, false
}

func stampOf(st *unix.Stat_t) Stamp {
	return Stamp{uint64(st.Dev), st.Ino, st.Mode, st.Size, st.Mtim, st.Ctim}
}

// Unchanged reports whether two stamps are of the same file with the same size and times.
func Unchanged(before, after Stamp) bool {
	return before.Dev == after.Dev && before.Ino == after.Ino && before.Size == after.Size &&
		before.Mtime == after.Mtime && before.Ctime == after.Ctime
}

// Writers says whether anyone has a file open for writing, as a read lease probe tells it.
type Writers int

const (
	WritersNone    Writers = iota // a read lease was granted: nobody had the file open for writing
	WritersOpen                   // refused with EAGAIN: someone has the file open for writing
	WritersUnknown                // no lease to be had (not the owner without CAP_LEASE, filesystem, not a regular file)
)

// ProbeWriters takes a read lease on f and gives it straight back. f must be open read-only (a
// lease needs that). A process opening the file for writing meanwhile waits only for the
// microseconds the lease is held (or, opening with O_NONBLOCK, gets EWOULDBLOCK), and the kernel
// sends this process SIGIO, which Go ignores unless it is asked for. It costs two fcntl calls.
func ProbeWriters(f *os.File) Writers {
	// Fd has no side effect on a regular file, which is never in the poller.
	fd := f.Fd()
	_, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_RDLCK)
	switch err {
	case nil:
		_, _ = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK)
		return WritersNone
	case unix.EAGAIN:
		return WritersOpen
	}
	return WritersUnknown
}

// Read is one checked read of an open file: Begin before its first byte, Check after its last.
type Read struct {
	f       *os.File
	path    string
	info    fs.FileInfo
	before  Stamp
	start   time.Time
	atStart Writers
}

// Begin stats the open file f and probes it for writers; call it before reading the first byte,
// and take the size to read from Info or Stamp. path only names the file in errors.
func Begin(f *os.File, path string) (*Read, error) {
	// The clock is read before the stat, so that the age of the last change is never overstated.
	return beginAt(f, path, time.Now())
}

// beginAt is Begin for a read that began at start: the time the age of the file's last change
// is measured from (tests pass a later one instead of sleeping until a change is old).
func beginAt(f *os.File, path string, start time.Time) (*Read, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return BeginStat(f, path, fi, start)
}

// BeginStat is Begin for a file the caller has just stat'ed through its descriptor (fi), with
// start read from the clock before that stat: a capture has the stat from opening the file, and
// saves one syscall per file.
func BeginStat(f *os.File, path string, fi fs.FileInfo, start time.Time) (*Read, error) {
	st, ok := StampOf(fi)
	if !ok {
		return nil, fmt.Errorf("stat %s: no stat record", path)
	}
	r := &Read{f: f, path: path, info: fi, before: st, start: start, atStart: WritersUnknown}
	if fi.Mode().IsRegular() {
		// After the stat and before the first byte: a write in progress at the stat has the
		// file open for writing until it is done.
		r.atStart = ProbeWriters(f)
	}
	return r, nil
}

// Info is the file's stat taken by Begin.
func (r *Read) Info() fs.FileInfo { return r.info }

// Stamp is the stamp of that stat.
func (r *Read) Stamp() Stamp { return r.before }

// age is how long before the read began the file last changed; a ctime in the future counts as
// just now.
func (r *Read) age() time.Duration {
	return r.start.Sub(time.Unix(r.before.Ctime.Unix()))
}

// Settled reports whether the file was at rest when the read began: then Check decides on a
// second stat alone and never reads again, so a caller that digests the bytes only for Check may
// skip that and pass a nil sum.
func (r *Read) Settled() bool {
	switch age := r.age(); {
	case r.atStart == WritersNone && age > coarseTick:
		// Nothing was being written, and any later write moves ctime.
		return true
	case r.atStart == WritersUnknown && age > settleTime:
		// Without a lease, a write in progress at the stat would have had to last longer than
		// any plausible single write.
		return true
	}
	return false
}

// Check decides whether the bytes [off, off+n) just read from the file, whose SHA-256 is sum, are
// of one version of it. It returns nil when they are, an *Error (changed_during_capture) when they
// may not be, and any other error when the file could not be checked (stat or read failure). It
// re-reads the section only when the file is not Settled.
func (r *Read) Check(ctx context.Context, off, n int64, sum []byte) error {
	if err := r.unchanged(); err != nil {
		return err
	}
	if r.Settled() {
		return nil
	}
	if ProbeWriters(r.f) == WritersOpen && r.age() < settleTime {
		return changed(r.path, "changed while it was read (open for writing and changed moments ago)")
	}
	// With no writer now, the file is at rest: reading it again gives that version, and a write
	// starting after the probe moves ctime. Otherwise this is the best check left.
	if len(sum) != sha256.Size {
		return fmt.Errorf("%s: checking a read of a file that was just changed needs its SHA-256", r.path)
	}
	// A write that began before the first stat and is still copying (a slow one: its source
	// faulted in page by page, or throttled on a busy machine, can take seconds) stamped the
	// times long ago and may stall between the two reads, which then agree on the same torn mix.
	// Waiting for it first makes the second read see where it ended.
	if err := waitForWrites(ctx, r.f); errors.Is(err, errWriteInProgress) {
		return changed(r.path, "changed while it was read ("+err.Error()+")")
	} else if err != nil {
		return err
	}
	again, err := r.digest(ctx, off, n)
	if err != nil {
		return err
	}
	if !bytes.Equal(again, sum) {
		return changed(r.path, "changed while it was read (a second read differs)")
	}
	return r.unchanged()
}

// unchanged compares the file's stat now with Begin's.
func (r *Read) unchanged() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(r.f.Fd()), &st); err != nil {
		return fmt.Errorf("fstat %s: %w", r.path, err)
	}
	if !Unchanged(r.before, stampOf(&st)) {
		return changed(r.path, "changed while it was read (its size, times or inode moved)")
	}
	return nil
}

// digest reads [off, off+n) again through the descriptor and returns its SHA-256; a file that
// has shrunk meanwhile is a change.
func (r *Read) digest(ctx context.Context, off, n int64) ([]byte, error) {
	h := sha256.New()
	buf := make([]byte, max(1, min(n, 256<<10)))
	sr := io.NewSectionReader(r.f, off, n)
	var got int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k, err := sr.Read(buf)
		h.Write(buf[:k])
		got += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s again: %w", r.path, err)
		}
	}
	if got != n {
		return nil, changed(r.path, fmt.Sprintf("changed while it was read (a second read got %d of %d bytes)", got, n))
	}
	return h.Sum(nil), nil
}

// errWriteInProgress is what waitForWrites says of a write that did not finish within writeWait.
var errWriteInProgress = errors.New("a write to it was still in progress")

// writeWait bounds waitForWrites: a write still copying after that long is a file being
// written, not one at rest.
const writeWait = settleTime

// waitForWrites returns once every write(2) to f that was under way when it was called has
// finished, or with errWriteInProgress after writeWait, or ctx's error. A buffered write holds
// the inode's lock (i_rwsem) exclusively from its first byte to its last, and SEEK_DATA takes the
// same lock shared on the filesystems a workspace lives on (ext4, xfs, btrfs, tmpfs, overlayfs),
// so the seek waits for such a write — in an uninterruptible sleep, hence a goroutine of its own
// on a duplicate of the descriptor (its own number, which a caller closing f cannot hand to
// another file; the same open file, whose offset it puts back). A wait given up on leaves that
// goroutine until the write ends. Where a filesystem does not take the lock this waits for
// nothing, and the checks around it are what is left.
func waitForWrites(ctx context.Context, f *os.File) error {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil // no descriptor to spare: the checks around this still stand
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		cur, err := unix.Seek(fd, 0, io.SeekCurrent)
		if err != nil {
			return
		}
		_, _ = unix.Seek(fd, 0, unix.SEEK_DATA)
		_, _ = unix.Seek(fd, cur, io.SeekStart)
	}()
	t := time.NewTimer(writeWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return errWriteInProgress
	case <-ctx.Done():
		return ctx.Err()
	}
}
