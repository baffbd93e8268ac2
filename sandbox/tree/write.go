package tree

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/ctxio"
	"github.com/tetherhq/tether/sandbox/stableread"
)

// WriteOptions controls Write.
type WriteOptions struct {
	// Zstd compresses the stream with concurrent zstd blocks.
	Zstd bool
	// SkipSpecial leaves out sockets, fifos and devices instead of failing
	// on the first one (a Git fsmonitor socket in .git is a common case).
	SkipSpecial bool
	// Prefix, when set, names the directory itself in the archive (one entry, with its mode
	// and mtime) and puts every entry beneath it: Prefix/a, Prefix/b/c. Empty: entries are
	// named relative to the directory, which itself has no entry.
	Prefix string
	// Progress, when set, is told the length of every piece of file content archived.
	Progress func(n int64)
}

// Write streams the host directory dir as a PAX tar to w: regular files,
// directories (an empty one too) and symlinks as links, with permission
// bits and modification times, in lexical path order, .git included as it
// is. Nothing below dir is followed; dir itself may be a symlink, being the
// user's own argument.
func Write(ctx context.Context, w io.Writer, dir string, opts WriteOptions) (err error) {
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("source directory: %w", err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("source directory: %w", err)
	} else if !fi.IsDir() {
		return &fsguard.Error{Code: fsguard.CodeNotDirectory, Path: dir, Message: "source is not a directory"}
	}
	out := w
	if opts.Zstd {
		enc, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithConcurrentBlocks(true))
		if err != nil {
			return fmt.Errorf("zstd: %w", err)
		}
		defer func() {
			if cerr := enc.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("zstd: %w", cerr)
			}
		}()
		out = enc
	}
	tw := tar.NewWriter(out)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case opts.Prefix == "" && rel == ".":
			return nil
		case rel == ".":
			rel = opts.Prefix
		case opts.Prefix != "":
			rel = opts.Prefix + "/" + rel
		}
		return writeEntry(ctx, tw, p, rel, d, opts)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	return nil
}

func writeEntry(ctx context.Context, tw *tar.Writer, p, rel string, d fs.DirEntry, opts WriteOptions) error {
	fi, err := d.Info() // lstat: WalkDir never follows links
	if err != nil {
		return err
	}
	h := &tar.Header{
		Name:    rel,
		Mode:    tarMode(fi.Mode()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX,
	}
	switch fi.Mode().Type() {
	case fs.ModeDir:
		h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		return tw.WriteHeader(h)
	case fs.ModeSymlink:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(h)
	case 0:
		return writeFile(ctx, tw, p, h, fi, opts.Progress)
	}
	if opts.SkipSpecial {
		return nil
	}
	return &fsguard.Error{Code: fsguard.CodeInvalidArgument, Path: rel,
		Message: fmt.Sprintf("cannot archive %v (socket, fifo or device)", fi.Mode().Type())}
}

// writeFile copies exactly the size the header announced and fails if the
// file changed while it was read, rather than archive a torn copy: a short
// read, or anything stableread.Check finds (inode, size, mtime or ctime
// moved; or, for a file changed within the last second or held open by a
// writer, a second read that differs), fails the whole import with
// changed_during_capture.
func writeFile(ctx context.Context, tw *tar.Writer, p string, h *tar.Header, before fs.FileInfo, progress func(int64)) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	rd, err := stableread.Begin(f, p)
	if err != nil {
		return err
	}
	opened := rd.Info()
	if !opened.Mode().IsRegular() || !os.SameFile(before, opened) {
		return fmt.Errorf("%s: replaced while being archived", p)
	}
	h.Typeflag, h.Size = tar.TypeReg, opened.Size()
	h.ModTime = opened.ModTime()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// The digest is only needed when Check may read the file again.
	var sum hash.Hash
	dst := io.Writer(tw)
	if !rd.Settled() {
		sum = sha256.New()
		dst = io.MultiWriter(tw, sum)
	}
	if progress != nil {
		dst = progressWriter{dst, progress}
	}
	n, err := io.Copy(dst, ctxio.Reader{Ctx: ctx, R: io.LimitReader(f, h.Size)})
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if n != h.Size {
		return &stableread.Error{Path: p, Reason: fmt.Sprintf("shrank while it was read (%d of %d bytes)", n, h.Size)}
	}
	var digest []byte
	if sum != nil {
		digest = sum.Sum(nil)
	}
	return rd.Check(ctx, 0, h.Size, digest)
}

func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// progressWriter tells every write's length.
type progressWriter struct {
	w    io.Writer
	tell func(int64)
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.tell(int64(n))
	return n, err
}
