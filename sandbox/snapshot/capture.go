package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/internal/routine"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/gitstate"
	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

// CaptureOptions controls Capture.
type CaptureOptions struct {
	WorkspaceID string
	Epoch       uint64
	Parent      string
	ToolVersion string
	// ZstdLevel is a zstd command-line level (1-22, mapped onto the
	// encoder's four speeds); 0 means the fastest.
	ZstdLevel int
	// Concurrency is the zstd encoder's concurrency
	// (zstd.WithEncoderConcurrency): above 1, blocks are compressed in
	// the background while the tree is read. 0 means GOMAXPROCS, at most
	// maxConcurrency.
	Concurrency int
	// SerialBlocks turns off the compression of independent blocks in parallel
	// (zstd.WithConcurrentBlocks), which is on whenever Concurrency is above 1.
	SerialBlocks bool
	// Refs, when set, is the cache of the capture (or restore) of Parent: files it proves
	// unchanged are listed as refs and not archived (cache.go). The caller checks that it
	// belongs to Parent.
	Refs *Cache
	// Record, when set, receives every file of a successful capture, for the next one's
	// Refs; Start is when this capture began (the cache's start).
	Record *CacheWriter
}

// maxConcurrency caps the default encoder concurrency.
const maxConcurrency = 4

// zstdWindow is the encoder's window with serial blocks, that of the zstd command line's
// level 1 (512 KiB).
const zstdWindow = 512 << 10

// concurrentWindow is the window with concurrent blocks. Each of the encoder's goroutines
// holds its own history and block buffers, so memory grows with window × concurrency: at
// 512 KiB two goroutines cost ~58 MiB of heap, at 128 KiB (with the encoder's lower-memory
// mode) ~13 MiB, which with the streamed manifest keeps the runner within its 64 MiB. On
// source trees the smaller window costs about 3 % in size (Go's own sources: 0.306 of the
// tar vs 0.297).
const concurrentWindow = 128 << 10

// copyBufSize is the read size for file contents.
const copyBufSize = 256 << 10

// Capture streams the workspace as tar (PAX, lexical order) compressed
// with zstd into w, and returns the manifest it also wrote as the
// archive's last entry. Nothing is staged on disk: every byte goes from
// the workspace (read through the guard) to w. On error, w has received a
// prefix of an archive without a manifest, which Restore refuses; the
// caller should still abort whatever w feeds.
func Capture(ctx context.Context, root *fsguard.Root, w io.Writer, opts CaptureOptions) (*Manifest, error) {
	if root == nil || w == nil {
		return nil, newError(CodeInvalidArgument, "", "capture needs a root and a writer", nil)
	}
	level := zstd.SpeedFastest
	switch {
	case opts.ZstdLevel < 0 || opts.ZstdLevel > 22:
		return nil, newError(CodeInvalidArgument, "", fmt.Sprintf("zstd level %d is not in 0..22", opts.ZstdLevel), nil)
	case opts.ZstdLevel > 0:
		level = zstd.EncoderLevelFromZstd(opts.ZstdLevel)
	}
	conc := opts.Concurrency
	if conc < 0 {
		return nil, newError(CodeInvalidArgument, "", "negative concurrency", nil)
	}
	if conc == 0 {
		conc = min(runtime.GOMAXPROCS(0), maxConcurrency)
	}
	m := &Manifest{
		Version:     FormatVersion,
		WorkspaceID: opts.WorkspaceID,
		Epoch:       opts.Epoch,
		Parent:      opts.Parent,
		ToolVersion: opts.ToolVersion,
		CreatedAt:   time.Now().UTC(),
		Entries:     []Entry{},
		Skipped:     []Skipped{},
	}
	c := &capturer{ctx: ctx, m: m, buf: make([]byte, copyBufSize), refs: opts.Refs}
	// The Git status (0.18 s and 64 MiB allocated on a 300-commit repository) is read while
	// the walk streams, not before the first byte; the manifest, written last, waits for it.
	g := routine.New(ctx, nil)
	defer g.Stop()
	var git struct {
		st  *gitstate.State
		err string
	}
	g.Go("capture git status", func(context.Context) { git.st, git.err = planGit(root) })
	c.gitDone = func() {
		g.Stop()
		c.m.Git, c.m.GitError = git.st, git.err
	}
	enc, err := zstd.NewWriter(w, encoderOptions(level, conc, opts.SerialBlocks)...)
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	c.tw, c.raw = tar.NewWriter(enc), enc
	if err := c.run(root); err != nil {
		// Stop feeding w: the encoder's buffered blocks go nowhere.
		enc.Reset(io.Discard)
		enc.Close()
		return nil, err
	}
	if err := c.tw.Close(); err != nil {
		enc.Close()
		return nil, fmt.Errorf("write archive: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("write archive: %w", err)
	}
	if opts.Record != nil {
		c.record(opts.Record)
	}
	return m, nil
}

// encoderOptions are the zstd encoder's: blocks compressed in parallel within the runner's
// memory budget unless serial ones were asked for. Without them the encoder is a chain of
// 128 KiB stages and the runner uses about one core whatever the machine has.
func encoderOptions(level zstd.EncoderLevel, conc int, serial bool) []zstd.EOption {
	opts := []zstd.EOption{zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(conc)}
	if serial || conc < 2 {
		return append(opts, zstd.WithWindowSize(zstdWindow))
	}
	return append(opts, zstd.WithConcurrentBlocks(true), zstd.WithWindowSize(concurrentWindow), zstd.WithLowerEncoderMem(true))
}

// capturer holds one capture's state.
type capturer struct {
	ctx context.Context
	tw  *tar.Writer
	raw io.Writer // what tw writes to: sparse entries are written there (sparse.go)
	m   *Manifest
	buf []byte
	// fence re-checks every archived entry once the walk is done (fence.go).
	fence fence
	// refs is the parent's capture cache, nil for a full capture.
	refs *Cache
	// gitDone waits for the Git status read beside the walk and puts it in the manifest.
	gitDone func()
}

// record writes the stamps of the capture's files, as the fence last saw them, into cw.
func (c *capturer) record(cw *CacheWriter) {
	for _, mk := range c.fence.marks {
		if mk.entry != rootMark && c.m.Entries[mk.entry].Type == TypeFile {
			cw.add(&c.m.Entries[mk.entry], mk.stamp)
		}
	}
}

func (c *capturer) run(root *fsguard.Root) error {
	readAt := time.Now()
	before, err := lstat(root, ".")
	if err != nil {
		return err
	}
	c.fence.add(rootMark, stableread.FromStat(before), stableread.Racy(stableread.FromStat(before), readAt))
	if err := c.walk(root, ".", before, false); err != nil {
		return err
	}
	if err := c.fence.verify(c.ctx, root, c.m, c.buf); err != nil {
		return err
	}
	c.m.Totals = totals(c.m.Entries)
	c.gitDone()
	return writeManifest(c.tw, c.m)
}

// walk archives the children of the directory d (at rel) in lexical
// order, then checks that d did not change meanwhile: an entry created,
// removed or renamed in it changes its mtime and ctime.
func (c *capturer) walk(d *fsguard.Root, rel string, before *unix.Stat_t, inGit bool) error {
	ents, err := d.ReadDir(".")
	if err != nil {
		return c.vanished(rel, err)
	}
	for _, e := range ents {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		p := join(rel, name)
		fi, err := e.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*unix.Stat_t)
		if skip, err := c.reservedEntry(d, rel, name, p, st); err != nil {
			return err
		} else if skip {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = c.dir(d, name, p, st, inGit || name == ".git")
		case unix.S_IFREG:
			if inGit && strings.HasSuffix(name, ".lock") {
				return newError(CodeGitBusy, p, "a Git lock file exists: a Git command is running (or crashed; remove the lock if no git process is running)", nil)
			}
			err = c.file(d, name, p, st)
		case unix.S_IFLNK:
			err = c.symlink(d, name, p, st)
		default:
			c.skip(p, st.Mode, "special file")
		}
		if err != nil {
			return err
		}
	}
	after, err := lstat(d, ".")
	if err != nil {
		return err
	}
	if !sameDir(before, after) {
		return newError(CodeChangedDuringCapture, rel, "directory changed while it was archived", nil)
	}
	return nil
}

func (c *capturer) dir(d *fsguard.Root, name, p string, listed *unix.Stat_t, inGit bool) error {
	sub, err := d.OpenDir(name)
	if err != nil {
		return c.vanished(p, err)
	}
	defer sub.Close()
	readAt := time.Now()
	st, err := lstat(sub, ".")
	if err != nil {
		return err
	}
	if st.Ino != listed.Ino || st.Dev != listed.Dev {
		return newError(CodeChangedDuringCapture, p, "directory replaced while it was archived", nil)
	}
	if err := c.header(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir}, st); err != nil {
		return err
	}
	c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeDir, Mode: st.Mode & 0o7777, MTime: mtime(st)})
	c.fence.add(len(c.m.Entries)-1, stableread.FromStat(st), stableread.Racy(stableread.FromStat(st), readAt))
	return c.walk(sub, p, st, inGit)
}

func (c *capturer) file(d *fsguard.Root, name, p string, listed *unix.Stat_t) error {
	if c.refs != nil {
		st := stableread.FromStat(listed)
		if l := c.refs.unchanged(p, st); l != nil {
			// The listing's stamp proves the bytes; the fence looks at the file again at the end.
			c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeFile, Mode: st.Mode & 0o7777, Size: st.Size,
				SHA256: l.SHA256, MTime: time.Unix(st.Mtime.Unix()).UTC(), Sparse: l.Sparse, Ref: true})
			c.fence.add(len(c.m.Entries)-1, st, false)
			return nil
		}
	}
	// The clock is read before the stat, so that the age of the last change is never overstated.
	start := time.Now()
	f, fi, err := d.OpenStat(name)
	if err != nil {
		return c.vanished(p, err)
	}
	defer f.Close()
	rd, err := stableread.BeginStat(f, p, fi, start)
	if err != nil {
		return err
	}
	return c.copyFile(p, f, rd, &fileID{ino: listed.Ino, dev: listed.Dev})
}

// fileID identifies an inode.
type fileID struct{ ino, dev uint64 }

// copyFile archives the open regular file f as p. The file must be the
// one that was listed (same inode) and must not change while it is read:
// a short read fails, and so does anything that stableread.Check finds
// (inode, size, mtime or ctime moved; or, for a file changed within the
// last second or held open by a writer, a second read that differs). The
// entry's bytes are in the archive by then: a failed check fails the
// whole capture, so nothing that holds them is ever published.
func (c *capturer) copyFile(p string, f *os.File, rd *stableread.Read, listed *fileID) error {
	before := rd.Stamp()
	if before.Mode&unix.S_IFMT != unix.S_IFREG || (listed != nil && (before.Ino != listed.ino || before.Dev != listed.dev)) {
		return newError(CodeChangedDuringCapture, p, "file replaced while it was archived", nil)
	}
	mt := time.Unix(before.Mtime.Unix()).UTC()
	if rs := sparseRegions(f, rd); rs != nil {
		if err := c.copySparse(p, f, rd, rs, mt); err != nil {
			return err
		}
		c.fence.add(len(c.m.Entries)-1, before, rd.Racy())
		return nil
	}
	h := &tar.Header{Name: p, Typeflag: tar.TypeReg, Size: before.Size, Mode: int64(before.Mode & 0o7777), ModTime: mt, Format: tar.FormatPAX}
	if err := c.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	sum := sha256.New()
	left := before.Size
	for left > 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(c.buf[:min(int64(len(c.buf)), left)])
		if n > 0 {
			sum.Write(c.buf[:n])
			if _, werr := c.tw.Write(c.buf[:n]); werr != nil {
				return fmt.Errorf("write archive: %w", werr)
			}
			left -= int64(n)
		}
		if err == io.EOF {
			return newError(CodeChangedDuringCapture, p, fmt.Sprintf("file shrank while it was archived (short read: %d of %d bytes)", before.Size-left, before.Size), nil)
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
	}
	digest := sum.Sum(nil)
	if err := rd.Check(c.ctx, 0, before.Size, digest); err != nil {
		var ce *stableread.Error
		if errors.As(err, &ce) {
			return newError(CodeChangedDuringCapture, p, "file "+ce.Reason, nil)
		}
		return err
	}
	c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeFile, Mode: before.Mode & 0o7777, Size: before.Size,
		SHA256: hex.EncodeToString(digest), MTime: mt})
	c.fence.add(len(c.m.Entries)-1, before, rd.Racy())
	return nil
}

func (c *capturer) symlink(d *fsguard.Root, name, p string, st *unix.Stat_t) error {
	target, err := d.Readlink(name)
	if err != nil {
		return c.vanished(p, err)
	}
	if err := c.header(&tar.Header{Name: p, Typeflag: tar.TypeSymlink, Linkname: target}, st); err != nil {
		return err
	}
	c.m.Entries = append(c.m.Entries, Entry{Path: p, Type: TypeSymlink, Mode: st.Mode & 0o7777, LinkTarget: target, MTime: mtime(st)})
	// Never racy: a symlink's target cannot change in place (fence.go).
	c.fence.add(len(c.m.Entries)-1, stableread.FromStat(st), false)
	return nil
}

// header completes h with the mode and mtime of st and writes it.
func (c *capturer) header(h *tar.Header, st *unix.Stat_t) error {
	h.Mode = int64(st.Mode & 0o7777)
	h.ModTime = mtime(st)
	h.Format = tar.FormatPAX
	if err := c.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}

func (c *capturer) skip(p string, mode uint32, reason string) {
	c.m.Skipped = append(c.m.Skipped, Skipped{Path: p, Type: typeName(mode), Reason: reason})
}

// vanished types the failure to open something that was just listed: it
// was removed or replaced by something else meanwhile.
func (c *capturer) vanished(p string, err error) error {
	switch fsguard.CodeOf(err) {
	case fsguard.CodeNotFound, fsguard.CodeSymlinkRefused, fsguard.CodeNotDirectory, fsguard.CodeInvalidArgument:
		return newError(CodeChangedDuringCapture, p, "entry removed or replaced while it was archived", err)
	}
	return err
}

func lstat(d *fsguard.Root, rel string) (*unix.Stat_t, error) {
	fi, err := d.Lstat(rel)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*unix.Stat_t)
	if !ok {
		return nil, errors.New("lstat: no stat data")
	}
	return st, nil
}

func sameDir(a, b *unix.Stat_t) bool {
	return a.Ino == b.Ino && a.Dev == b.Dev && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

func mtime(st *unix.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()).UTC() }

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "char_device"
	case unix.S_IFBLK:
		return "block_device"
	}
	return "unknown"
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return path.Join(dir, name)
}
