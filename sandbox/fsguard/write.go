package fsguard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temporary file WriteFile creates.
// Snapshot capture and listings may skip such names: they are never a
// finished file.
const TempPrefix = ".tether-tmp-"

// WriteOptions controls WriteFile.
type WriteOptions struct {
	// Replace allows replacing an existing file at the destination. A
	// directory or symlink there is never replaced.
	Replace bool
	// MTime, when not zero, becomes the file's modification time.
	MTime time.Time
	// Verify, when set, is called with the byte count and digest after the
	// data is on disk but before it is published; an error aborts the
	// write. It is how a caller checks a transfer's trailer (count and
	// SHA-256) without a window in which an unverified file is visible.
	Verify func(WriteResult) error
	// NoSync skips both fsyncs. Only for writes that are not yet visible
	// to anyone, such as files in a staging directory that the caller
	// makes durable all at once with Root.Sync before publishing it.
	NoSync bool
	// IfSHA256, when set, publishes only if the destination's current
	// content has this SHA-256 (lowercase hex); otherwise the write fails
	// with CodeConflict and changes nothing. It implies Replace.
	IfSHA256 string
	// MaxBytes, when positive, fails a write whose source is larger with
	// CodeTooLarge before more than MaxBytes+1 bytes were read.
	MaxBytes int64
	// Xattrs are extended attributes set on the file before it is
	// published. A filesystem without extended attributes (ENOTSUP) is not
	// an error: the attributes are a label, not a guarantee.
	Xattrs map[string]string
	// Sparse leaves every aligned all-zero block (HoleBlock) of the content as a hole
	// instead of writing it, so a file restored from a sparse archive takes the blocks its
	// data needs, not its length.
	Sparse bool
	// Hash, when set, is the digest WriteResult.SHA256 reports (in hex) instead of SHA-256:
	// for callers whose content has a digest of its own, so nothing is hashed twice.
	Hash hash.Hash
	// InPlace creates the file O_EXCL under its final name instead of a temporary one renamed
	// over it, and removes it on failure: only for a directory nobody else sees, such as a
	// restore's private staging directory, which is published (or removed) whole. It saves a
	// name, a hold and a rename per file; it requires NoSync and refuses Replace and IfSHA256.
	InPlace bool
	// ReservedName allows a destination whose name starts with TempPrefix: a restore puts back
	// such a file, which an agent made and a snapshot archived.
	ReservedName bool
	// holds is the root's: the temporary file is held while it exists.
	holds *Holds
	// bufs is the root's buffer pool.
	bufs *bufPool
}

// WriteResult describes the bytes written.
type WriteResult struct {
	Bytes  int64
	SHA256 string // lowercase hex
}

// WriteFile atomically creates (or, with Replace, replaces) the regular
// file rel with the contents of src and the permission bits of mode. The
// data goes to an O_EXCL temporary file in the destination directory, is
// fsynced, renamed into place (RENAME_NOREPLACE unless Replace), and the
// directory is fsynced. On any error, including ctx being cancelled while
// src is read, the temporary file is removed and nothing appears at rel.
func (r *Root) WriteFile(ctx context.Context, rel string, src io.Reader, mode fs.FileMode, opts WriteOptions) (WriteResult, error) {
	var res WriteResult
	err := r.withParent(rel, func(pfd int, name, clean string) error {
		if strings.HasPrefix(name, TempPrefix) && !opts.ReservedName {
			return newError(CodeInvalidArgument, clean, "name is reserved for temporary files", nil)
		}
		var err error
		opts.holds, opts.bufs = r.holds, r.bufs
		res, err = writeAt(ctx, pfd, name, clean, src, mode, opts)
		return err
	})
	return res, err
}

func writeAt(ctx context.Context, pfd int, name, clean string, src io.Reader, mode fs.FileMode, opts WriteOptions) (WriteResult, error) {
	// Refusing early saves copying a large body only to fail at rename;
	// the rename below is still what decides.
	// A symlink at the destination is refused rather than replaced: the
	// caller most likely meant its target, which is never written through.
	// (If one is planted after this check, Replace swaps out the link
	// itself, which leaves its target untouched.)
	if opts.InPlace && (opts.Replace || opts.IfSHA256 != "" || !opts.NoSync) {
		return WriteResult{}, newError(CodeInvalidArgument, clean, "an in-place write creates a new file in a private directory: no replace, no sync", nil)
	}
	var st unix.Stat_t
	if opts.InPlace {
		// O_EXCL below decides; a private directory has nothing there.
	} else if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return WriteResult{}, newError(CodeExists, clean, "a directory exists at the destination", nil)
		case unix.S_IFLNK:
			return WriteResult{}, newError(CodeSymlinkRefused, clean, "destination is a symlink", unix.ELOOP)
		}
		if !opts.Replace && opts.IfSHA256 == "" {
			return WriteResult{}, newError(CodeExists, clean, "destination exists", unix.EEXIST)
		}
	}
	// fsync needs a readable descriptor; "." below the pinned parent is the
	// same directory, and opening it now means no failure can come between
	// publishing the file and syncing its directory except the sync itself.
	dfd := -1
	if !opts.NoSync {
		fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return WriteResult{}, mapErrno("open parent", clean, err)
		}
		dfd = fd
		defer unix.Close(dfd)
	}

	var (
		tmp    string
		f      *os.File
		unhold = func() {}
		err    error
	)
	if opts.InPlace {
		tmp, f, err = createExclusive(pfd, name, clean)
	} else {
		tmp, f, unhold, err = opts.holds.createHeldTemp(pfd, clean)
	}
	if err != nil {
		return WriteResult{}, err
	}
	defer unhold() // deferred first, so it runs once the file is published or removed
	published := false
	defer func() {
		f.Close()
		if !published {
			unix.Unlinkat(pfd, tmp, 0)
		}
	}()

	if opts.MaxBytes > 0 {
		src = &limitedReader{r: src, left: opts.MaxBytes, clean: clean}
	}
	var dst io.Writer = &Writeback{F: f}
	var direct *DirectWriter
	var holes *holeWriter
	switch {
	case opts.Sparse:
		holes = newHoleWriter(f)
		dst = holes
	case !opts.NoSync:
		// A write that is synced on its own (a put, not a restore's many files synced at once)
		// goes to the disk directly past its first MiBs.
		direct = &DirectWriter{F: f, After: DirectAfter}
		dst = direct
	}
	h := opts.Hash
	if h == nil {
		h = sha256.New()
	}
	buf := opts.bufs.get()
	res, err := copyHashed(ctx, dst, src, h, *buf)
	opts.bufs.put(buf)
	if direct != nil {
		err = errors.Join(err, direct.Finish())
	}
	if err == nil && holes != nil {
		err = holes.finish()
	}
	if err != nil {
		return WriteResult{}, fmt.Errorf("write %s: %w", clean, err)
	}
	if err := unix.Fchmod(int(f.Fd()), unixPerm(mode)); err != nil {
		return WriteResult{}, mapErrno("chmod", clean, err)
	}
	for k, v := range opts.Xattrs {
		if err := unix.Fsetxattr(int(f.Fd()), k, []byte(v), 0); err != nil && err != unix.ENOTSUP && err != unix.EOPNOTSUPP {
			return WriteResult{}, mapErrno("setxattr", clean, err)
		}
	}
	if !opts.MTime.IsZero() {
		if err := futimens(int(f.Fd()), opts.MTime); err != nil {
			return WriteResult{}, mapErrno("chtimes", clean, err)
		}
	}
	if !opts.NoSync {
		if err := f.Sync(); err != nil {
			return WriteResult{}, fmt.Errorf("fsync %s: %w", clean, err)
		}
	}
	if opts.Verify != nil {
		if err := opts.Verify(res); err != nil {
			return WriteResult{}, fmt.Errorf("verify %s: %w", clean, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, fmt.Errorf("write %s: %w", clean, err)
	}
	if opts.IfSHA256 != "" {
		// Checked as late as possible: only the rename itself comes after.
		if err := expectContent(pfd, name, clean, opts.IfSHA256); err != nil {
			return WriteResult{}, err
		}
	}
	switch {
	case opts.InPlace:
		err = nil // already under its name
	case opts.Replace || opts.IfSHA256 != "":
		err = unix.Renameat(pfd, tmp, pfd, name)
	default:
		err = renameNoReplace(pfd, tmp, pfd, name)
	}
	switch err {
	case nil:
	case unix.EISDIR, unix.ENOTEMPTY, unix.EEXIST:
		return WriteResult{}, newError(CodeExists, clean, "destination exists", err)
	default:
		return WriteResult{}, mapErrno("rename", clean, err)
	}
	published = true
	if opts.NoSync {
		return res, nil
	}
	if err := unix.Fsync(dfd); err != nil {
		return res, fmt.Errorf("fsync directory of %s: %w", clean, err)
	}
	return res, nil
}

// Sync flushes the whole filesystem holding the root (syncfs(2)): one call
// makes a batch of NoSync writes durable.
func (r *Root) Sync() error {
	return r.withFD(".", unix.O_RDONLY|unix.O_DIRECTORY, func(fd int, clean string) error {
		if err := unix.Syncfs(fd); err != nil {
			return fmt.Errorf("syncfs: %w", err)
		}
		return nil
	})
}

// createExclusive creates name in pfd, refusing anything already there (a symlink included).
func createExclusive(pfd int, name, clean string) (string, *os.File, error) {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(pfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	})
	if err == unix.EEXIST {
		return "", nil, newError(CodeExists, clean, "destination exists", err)
	}
	if err != nil {
		return "", nil, mapErrno("create", clean, err)
	}
	return name, os.NewFile(uintptr(fd), name), nil
}

// createTemp makes an O_EXCL file with an unguessable name in the pinned
// directory; O_EXCL with O_CREAT also refuses to follow a symlink planted
// under that name.
func createTemp(pfd int, clean string) (string, *os.File, error) {
	for tries := 0; ; tries++ {
		var b [12]byte
		rand.Read(b[:])
		tmp := TempPrefix + hex.EncodeToString(b[:])
		fd, err := unix.Openat(pfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err == nil {
			return tmp, os.NewFile(uintptr(fd), tmp), nil
		}
		if (err == unix.EEXIST || err == unix.EINTR) && tries < 16 {
			continue
		}
		return "", nil, mapErrno("create temporary file for", clean, err)
	}
}

// copyHashed copies src to dst through buf, hashing what it copies.
func copyHashed(ctx context.Context, dst io.Writer, src io.Reader, h hash.Hash, buf []byte) (WriteResult, error) {
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return WriteResult{}, err
		}
		m, rerr := src.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			if _, err := dst.Write(buf[:m]); err != nil {
				return WriteResult{}, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return WriteResult{}, rerr
		}
	}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// futimens sets atime and mtime through the descriptor itself, as
// utimensat(fd, NULL, ...): x/sys only offers the path form, and its
// Futimes goes through /proc.
func futimens(fd int, mtime time.Time) error {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
	for {
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// expectContent checks that the regular file name in pfd hashes to want.
func expectContent(pfd int, name, clean, want string) error {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(pfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err == unix.ENOENT {
		return newError(CodeConflict, clean, "expected existing content with sha256 "+want+", found no file", nil)
	}
	if err != nil {
		return mapErrno("open", clean, err)
	}
	f := os.NewFile(uintptr(fd), clean)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return mapErrno("fstat", clean, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return newError(CodeConflict, clean, "destination is not a regular file", nil)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hash %s: %w", clean, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, want) {
		return newError(CodeConflict, clean, "content changed: sha256 is "+got+", expected "+want, nil)
	}
	return nil
}

// limitedReader fails once more than left bytes come from r.
type limitedReader struct {
	r     io.Reader
	left  int64
	clean string
}

func (l *limitedReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, newError(CodeTooLarge, l.clean, "file exceeds the size limit", nil)
	}
	return n, err
}
