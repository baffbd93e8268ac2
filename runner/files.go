package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// defaultFileMode is the mode of a written file when the caller names none.
const defaultFileMode = 0o644

// withRoot opens the workspace root for one operation.
func (r *Runner) withRoot(fn func(root *fsguard.Root) error) error {
	root, err := fsguard.Open(r.cfg.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root)
}

func fileInfo(root *fsguard.Root, rel string, fi fs.FileInfo) protocol.FileInfo {
	out := protocol.FileInfo{Path: rel, Name: fi.Name(), Mode: uint32(fi.Mode().Perm()), Size: fi.Size(), MTime: fi.ModTime().UTC()}
	if rel == "." {
		out.Name = "."
	}
	switch {
	case fi.Mode().IsRegular():
		out.Type = protocol.FileRegular
	case fi.IsDir():
		out.Type = protocol.FileDir
	case fi.Mode()&fs.ModeSymlink != 0:
		out.Type = protocol.FileSymlink
		if target, err := root.Readlink(rel); err == nil {
			out.LinkTarget = target
		}
	default:
		out.Type = protocol.FileOther
	}
	return out
}

func (r *Runner) fsStat(h protocol.Header) (protocol.FileInfo, error) {
	var args protocol.FsPathArgs
	if err := decodeArgs(h, &args); err != nil {
		return protocol.FileInfo{}, err
	}
	return r.onPath(args.Path, nil)
}

// onPath resolves rel with the guard, applies fn (when not nil) and describes the result.
func (r *Runner) onPath(rel string, fn func(root *fsguard.Root, clean string) error) (protocol.FileInfo, error) {
	var out protocol.FileInfo
	err := r.withRoot(func(root *fsguard.Root) error {
		clean, err := fsguard.Clean(rel)
		if err != nil {
			return err
		}
		if fn != nil {
			if err := fn(root, clean); err != nil {
				return err
			}
		}
		fi, err := root.Lstat(clean)
		if err != nil {
			return err
		}
		out = fileInfo(root, clean, fi)
		return nil
	})
	return out, err
}

func (r *Runner) fsList(h protocol.Header) (protocol.FsListResult, error) {
	var args protocol.FsListArgs
	if err := decodeArgs(h, &args); err != nil {
		return protocol.FsListResult{}, err
	}
	if args.Limit <= 0 || args.Limit > protocol.MaxListPage {
		args.Limit = protocol.MaxListPage
	}
	out := protocol.FsListResult{Entries: []protocol.FileInfo{}}
	err := r.withRoot(func(root *fsguard.Root) error {
		clean, err := fsguard.Clean(args.Path)
		if err != nil {
			return err
		}
		dir, err := root.OpenDir(clean)
		if err != nil {
			return err
		}
		defer dir.Close()
		entries, err := dir.ReadDir(".")
		if err != nil {
			return err
		}
		// Entries come sorted by name; the cursor is the last name of the previous page.
		start := sort.Search(len(entries), func(i int) bool { return entries[i].Name() > args.Cursor })
		for _, e := range entries[start:] {
			if len(out.Entries) == args.Limit {
				out.Next = out.Entries[len(out.Entries)-1].Name
				break
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			info := fileInfo(dir, e.Name(), fi)
			info.Path = path.Join(clean, e.Name())
			out.Entries = append(out.Entries, info)
		}
		return nil
	})
	return out, err
}

func (r *Runner) fsMkdir(h protocol.Header) (protocol.FileInfo, error) {
	var args protocol.FsPathArgs
	if err := decodeArgs(h, &args); err != nil {
		return protocol.FileInfo{}, err
	}
	mode := fs.FileMode(args.Mode).Perm()
	if mode == 0 {
		mode = 0o755
	}
	return r.onPath(args.Path, func(root *fsguard.Root, clean string) error {
		if args.Parents {
			return root.MkdirAll(clean, mode)
		}
		return root.Mkdir(clean, mode)
	})
}

func (r *Runner) fsRemove(h protocol.Header) (struct{}, error) {
	var args protocol.FsPathArgs
	if err := decodeArgs(h, &args); err != nil {
		return struct{}{}, err
	}
	return struct{}{}, r.withRoot(func(root *fsguard.Root) error {
		clean, err := fsguard.Clean(args.Path)
		if err != nil {
			return err
		}
		if clean == "." {
			return protocol.Errorf(protocol.CodeInvalidArgument, "the workspace root cannot be removed")
		}
		if args.Recursive {
			// RemoveAll succeeds on a missing path; a remove of nothing is an error here.
			if _, err := root.Lstat(clean); err != nil {
				return err
			}
			return root.RemoveAll(clean)
		}
		err = root.Remove(clean)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return protocol.Errorf(protocol.CodeConflict, "%s is a directory that is not empty; remove it recursively", clean)
		}
		return err
	})
}

func (r *Runner) fsRename(h protocol.Header) (protocol.FileInfo, error) {
	var args protocol.FsRenameArgs
	if err := decodeArgs(h, &args); err != nil {
		return protocol.FileInfo{}, err
	}
	var out protocol.FileInfo
	err := r.withRoot(func(root *fsguard.Root) error {
		from, err := fsguard.Clean(args.From)
		if err != nil {
			return err
		}
		to, err := fsguard.Clean(args.To)
		if err != nil {
			return err
		}
		if from == "." || to == "." {
			return protocol.Errorf(protocol.CodeInvalidArgument, "the workspace root cannot be renamed")
		}
		if err := root.Rename(from, to, fsguard.RenameOptions{Replace: args.Replace}); err != nil {
			if fsguard.CodeOf(err) == "" && errors.Is(err, unix.EISDIR) {
				// Replacing a directory with a file: a refusal, not an internal failure.
				return protocol.Errorf(protocol.CodeExists, "%s: a directory exists at the destination", to)
			}
			return err
		}
		fi, err := root.Lstat(to)
		if err != nil {
			return err
		}
		out = fileInfo(root, to, fi)
		return nil
	})
	return out, err
}

func (r *Runner) fsChmod(h protocol.Header) (protocol.FileInfo, error) {
	var args protocol.FsPathArgs
	if err := decodeArgs(h, &args); err != nil {
		return protocol.FileInfo{}, err
	}
	if args.Mode&^0o777 != 0 {
		return protocol.FileInfo{}, protocol.Errorf(protocol.CodeInvalidArgument, "mode %o: only permission bits (0777) can be set", args.Mode)
	}
	return r.onPath(args.Path, func(root *fsguard.Root, clean string) error {
		return root.Chmod(clean, fs.FileMode(args.Mode))
	})
}

// fsWrite streams the body into a temp file beside the target and publishes it only when the
// body arrived whole (its terminator's count and SHA-256 match) and, when given, matches the
// sender's SHA-256 and the expected current content.
func (r *Runner) fsWrite(ctx context.Context, st *yamux.Stream, h protocol.Header) (protocol.FsWriteResult, error) {
	var args protocol.FsWriteArgs
	if err := decodeArgs(h, &args); err != nil {
		return protocol.FsWriteResult{}, err
	}
	mode := fs.FileMode(args.Mode)
	if mode == 0 {
		mode = defaultFileMode
	}
	if mode&^0o777 != 0 {
		return protocol.FsWriteResult{}, protocol.Errorf(protocol.CodeInvalidArgument, "mode %o: only permission bits (0777) can be set", args.Mode)
	}
	var out protocol.FsWriteResult
	err := r.withRoot(func(root *fsguard.Root) error {
		clean, err := fsguard.Clean(args.Path)
		if err != nil {
			return err
		}
		opts := fsguard.WriteOptions{Replace: args.Replace, IfSHA256: strings.ToLower(args.IfSHA256), MaxBytes: args.MaxBytes,
			Verify: func(res fsguard.WriteResult) error {
				if args.SHA256 != "" && !strings.EqualFold(args.SHA256, res.SHA256) {
					return protocol.Errorf(protocol.CodeFailed, "content hashes to %s, the sender said %s", res.SHA256, args.SHA256)
				}
				return nil
			}}
		res, err := root.WriteFile(ctx, clean, protocol.NewBodyReader(st), mode, opts)
		if err != nil {
			return err
		}
		out = protocol.FsWriteResult{Path: clean, Bytes: res.Bytes, SHA256: res.SHA256}
		return nil
	})
	return out, err
}

// fsRead answers with a reply (what will be sent), the body, then a trailer. A file that changes
// while it is read fails the trailer, so the receiver never takes a torn read for a good one.
func (r *Runner) fsRead(st *yamux.Stream, h protocol.Header) {
	var args protocol.FsReadArgs
	if err := decodeArgs(h, &args); err != nil {
		writeTrailer(st, nil, err)
		return
	}
	err := r.withRoot(func(root *fsguard.Root) error {
		clean, err := fsguard.Clean(args.Path)
		if err != nil {
			return err
		}
		// Refuse what is not a regular file before opening it: opening a device runs its
		// driver, and a socket cannot be opened at all (ENXIO). Open checks again on the
		// descriptor, so a swap after this look changes nothing.
		if fi, err := root.Lstat(clean); err != nil {
			return err
		} else if !fi.Mode().IsRegular() {
			return notRegular(clean, fi)
		}
		f, err := root.Open(clean)
		if err != nil {
			if fsguard.CodeOf(err) == "" && errors.Is(err, unix.ENXIO) {
				return protocol.Errorf(protocol.CodeInvalidArgument, "%s is not a regular file", clean)
			}
			return err
		}
		defer f.Close()
		start := time.Now()
		before, err := f.Stat()
		if err != nil {
			return err
		}
		if !before.Mode().IsRegular() {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%s is not a regular file", clean)
		}
		// After the first stat and before the first byte: see readWasStable.
		atStart := probeWriters(f)
		off, n, err := readRange(args, before.Size())
		if err != nil {
			return err
		}
		reply := protocol.FsReadReply{Info: fileInfo(root, clean, before), Offset: off, Length: n}
		writeTrailer(st, reply, nil)
		// From here on the reply is sent: failures go in the final trailer.
		stopWatch := abandonWatch(st)
		defer stopWatch()
		bw := protocol.NewBodyWriter(st)
		_ = st.SetWriteDeadline(time.Time{})
		if _, err := io.Copy(bw, io.NewSectionReader(f, off, n)); err != nil {
			writeTrailer(st, nil, fmt.Errorf("read %s: %w", clean, err))
			return nil
		}
		sent, err := bw.Finish()
		if err != nil {
			return nil
		}
		if !readWasStable(f, before, atStart, start, off, n, sent.SHA256) {
			writeTrailer(st, nil, protocol.Errorf(protocol.CodeChangedDuringCapture, "%s changed while it was read", clean))
			return nil
		}
		writeTrailer(st, nil, nil)
		return nil
	})
	if err != nil {
		writeTrailer(st, nil, err)
	}
}

// notRegular refuses to read an entry that is not a regular file, naming what it is.
func notRegular(clean string, fi fs.FileInfo) error {
	kind := "not a regular file"
	switch {
	case fi.IsDir():
		kind = "a directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		return protocol.Errorf(protocol.CodeSymlinkRefused, "%s is a symlink; it is never followed", clean)
	case fi.Mode()&fs.ModeNamedPipe != 0:
		kind = "a fifo"
	case fi.Mode()&fs.ModeSocket != 0:
		kind = "a socket"
	case fi.Mode()&fs.ModeDevice != 0:
		kind = "a device"
	}
	return protocol.Errorf(protocol.CodeInvalidArgument, "%s is %s, not a regular file", clean, kind)
}

// readRange turns a request into an offset and length within a file of size bytes.
func readRange(a protocol.FsReadArgs, size int64) (int64, int64, error) {
	if a.Suffix > 0 {
		n := min(a.Suffix, size)
		return size - n, n, nil
	}
	if a.Offset < 0 || (a.Offset > 0 && a.Offset >= size) {
		return 0, 0, protocol.Errorf(protocol.CodeInvalidRange, "offset %d is outside a file of %d bytes", a.Offset, size)
	}
	n := size - a.Offset
	if a.Length >= 0 && a.Length < n {
		n = a.Length
	}
	return a.Offset, n, nil
}

// unchanged compares an open file's identity, size and times with an earlier stat.
func unchanged(f interface{ Stat() (fs.FileInfo, error) }, before fs.FileInfo) error {
	after, err := f.Stat()
	if err != nil {
		return err
	}
	b, ok1 := stamp(before)
	a, ok2 := stamp(after)
	if !ok1 || !ok2 || a != b {
		return errors.New("changed")
	}
	return nil
}

// fileStamp is what changes when a file's content may have: identity, size and times. ctime
// matters most, since no caller can set it back.
type fileStamp struct {
	ino          uint64
	size         int64
	mtime, ctime unix.Timespec
}

// stamp reads a FileInfo's stat record. os.File.Stat carries a *syscall.Stat_t and the guard's
// Lstat a *unix.Stat_t; asserting only one of them once made every comparison fall back to
// size and mtime without saying so.
func stamp(fi fs.FileInfo) (fileStamp, bool) {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return fileStamp{st.Ino, st.Size, unix.Timespec(st.Mtim), unix.Timespec(st.Ctim)}, true
	case *unix.Stat_t:
		return fileStamp{st.Ino, st.Size, st.Mtim, st.Ctim}, true
	}
	return fileStamp{}, false
}

// coarseTick covers the coarsest timestamp clock (a jiffy at HZ=100 is 10 ms, with margin): two
// writes within one tick of such a clock can leave a file's times unchanged.
const coarseTick = 100 * time.Millisecond

// settleTime is how long a write(2) may plausibly stay in progress. A file still open for
// writing whose last change is more recent than this cannot be read as one version.
const settleTime = time.Second

// writers says whether anyone has a file open for writing, as a read lease probe tells it.
type writers int

const (
	writersNone    writers = iota // a read lease was granted: no write was in progress
	writersOpen                   // refused with EAGAIN: someone has the file open for writing
	writersUnknown                // no lease to be had (not the owner, no CAP_LEASE, filesystem)
)

// probeWriters takes a read lease and gives it straight back: the kernel grants one only while
// nobody has the file open for writing, and a process opening it for writing waits only while
// the lease is held.
func probeWriters(f *os.File) writers {
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	switch err {
	case nil:
		_, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		return writersNone
	case unix.EAGAIN:
		return writersOpen
	}
	return writersUnknown
}

// readWasStable decides whether the sum sent for a read is of one version of the file. Times
// alone cannot tell: write(2) stamps mtime and ctime once, before it copies its data, so a write
// already under way at the first stat keeps changing the file after it while the times stay the
// same, and a torn mix would pass. atStart is the writer probe taken right after that stat.
func readWasStable(f *os.File, before fs.FileInfo, atStart writers, start time.Time, off, n int64, sum string) bool {
	if unchanged(f, before) != nil {
		return false
	}
	age := time.Duration(0) // unknown: as if just changed
	if st, ok := stamp(before); ok {
		age = start.Sub(time.Unix(st.ctime.Unix()))
	}
	switch {
	case atStart == writersNone && age > coarseTick:
		// Nothing was being written; any later write moved ctime, which unchanged saw.
		return true
	case atStart == writersUnknown && age > settleTime:
		// Without leases, a write in progress at the first stat would have had to stall
		// for longer than any plausible write.
		return true
	}
	atEnd := probeWriters(f)
	if atEnd == writersOpen && age < settleTime {
		return false // changed moments ago and still open for writing: may still be changing
	}
	// With no writer now, the file is at rest: reading it again gives that version, and
	// a write starting after the probe moves ctime. Otherwise this is the best check left.
	return sameContent(f, off, n, sum) && unchanged(f, before) == nil
}

// sameContent re-reads a range and compares its digest with what was sent.
func sameContent(f *os.File, off, n int64, sum string) bool {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, off, n)); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == sum
}

// abandonWatch closes st when the controller closes its side while the runner is still sending:
// the controller only does that when its client went away, and closing unblocks a write that
// would otherwise wait forever for window the controller will never grant.
func abandonWatch(st *yamux.Stream) (stop func()) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, st)
		select {
		case <-done:
		default:
			st.Close()
		}
	}()
	return func() { close(done) }
}
