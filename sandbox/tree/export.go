package tree

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/ctxio"
	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

// ExportOptions controls Export.
type ExportOptions struct {
	// Name is the archive name of the exported entry itself (one path component); "" means its
	// own base name. The workspace root has none, so exporting "." needs one.
	Name string
}

// MaxSkippedNames bounds the names of special files an export lists as skipped; the count is
// always whole.
const MaxSkippedNames = 100

// ExportStats counts what Export archived and what it left out.
type ExportStats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
	// Skipped counts sockets, fifos and devices, which a tar of a workspace never carries;
	// SkippedNames names the first MaxSkippedNames of them (archive names).
	Skipped      int      `json:"skipped,omitempty"`
	SkippedNames []string `json:"skipped_names,omitempty"`
}

// Export streams the entry rel of root as a PAX tar to w: a directory with everything beneath it
// (in lexical order, an empty directory too), a regular file, or a symlink as a link. Entries are
// named opts.Name and opts.Name/…; permission bits and modification times travel with them.
// Everything is opened through the guard: no symlink is followed, anywhere. A file that changes
// while it is read (stableread) fails the export with changed_during_capture rather than send a
// torn copy; the receiver must then discard what it got, which a tar without its end marker
// already tells it to: the end marker is written only once every entry was read whole.
func Export(ctx context.Context, root *fsguard.Root, w io.Writer, rel string, opts ExportOptions) (ExportStats, error) {
	clean, err := fsguard.Clean(rel)
	if err != nil {
		return ExportStats{}, err
	}
	name := opts.Name
	if name == "" {
		if clean == "." {
			return ExportStats{}, invalid(clean, "the workspace root has no name of its own; name its archive entry")
		}
		name = path.Base(clean)
	}
	if c, err := fsguard.Clean(name); err != nil || c != name || strings.Contains(name, "/") || name == "." {
		return ExportStats{}, invalid(name, "the archive name must be one path component")
	}
	e := &exporter{ctx: ctx, tw: tar.NewWriter(w)}
	fi, err := root.Lstat(clean)
	if err != nil {
		return ExportStats{}, err
	}
	st := fi.Sys().(*unix.Stat_t)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		d, err := root.OpenDir(clean)
		if err != nil {
			return ExportStats{}, err
		}
		defer d.Close()
		err = e.dir(d, name, st)
		if err != nil {
			return ExportStats{}, err
		}
	case unix.S_IFREG:
		err = e.file(root, clean, name, st)
	case unix.S_IFLNK:
		err = e.symlink(root, clean, name, st)
	default:
		err = invalid(clean, "not a file, directory or symlink")
	}
	if err != nil {
		return ExportStats{}, err
	}
	if err := e.tw.Close(); err != nil {
		return ExportStats{}, fmt.Errorf("write archive: %w", err)
	}
	return e.stats, nil
}

type exporter struct {
	ctx   context.Context
	tw    *tar.Writer
	stats ExportStats
}

// dir archives the directory d (already open, listed as st) as p, then its entries.
func (e *exporter) dir(d *fsguard.Root, p string, listed *unix.Stat_t) error {
	fi, err := d.Lstat(".")
	if err != nil {
		return err
	}
	st := fi.Sys().(*unix.Stat_t)
	if st.Ino != listed.Ino || st.Dev != listed.Dev {
		return changed(p, "directory replaced while it was archived")
	}
	if err := e.header(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir}, st); err != nil {
		return err
	}
	e.stats.Dirs++
	ents, err := d.ReadDir(".")
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		name, child := ent.Name(), p+"/"+ent.Name()
		info, err := ent.Info()
		if err != nil {
			return err
		}
		cst := info.Sys().(*unix.Stat_t)
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = e.subdir(d, name, child, cst)
		case unix.S_IFREG:
			err = e.file(d, name, child, cst)
		case unix.S_IFLNK:
			err = e.symlink(d, name, child, cst)
		default:
			e.stats.Skipped++
			if len(e.stats.SkippedNames) < MaxSkippedNames {
				e.stats.SkippedNames = append(e.stats.SkippedNames, child)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *exporter) subdir(d *fsguard.Root, name, p string, listed *unix.Stat_t) error {
	sub, err := d.OpenDir(name)
	if err != nil {
		return vanished(p, err)
	}
	defer sub.Close()
	return e.dir(sub, p, listed)
}

// file archives the regular file name of d as p: exactly the size it had when opened, and only
// if it did not change while it was read.
func (e *exporter) file(d *fsguard.Root, name, p string, listed *unix.Stat_t) error {
	f, err := d.Open(name)
	if err != nil {
		return vanished(p, err)
	}
	defer f.Close()
	rd, err := stableread.Begin(f, p)
	if err != nil {
		return err
	}
	before := rd.Stamp()
	if before.Mode&unix.S_IFMT != unix.S_IFREG || before.Ino != listed.Ino || before.Dev != listed.Dev {
		return changed(p, "file replaced while it was archived")
	}
	h := &tar.Header{Name: p, Typeflag: tar.TypeReg, Size: before.Size, Mode: int64(before.Mode & 0o7777),
		ModTime: rd.Info().ModTime(), Format: tar.FormatPAX}
	if err := e.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	// The digest is needed only when Check may read the file a second time.
	var sum hash.Hash
	dst := io.Writer(e.tw)
	if !rd.Settled() {
		sum = sha256.New()
		dst = io.MultiWriter(e.tw, sum)
	}
	n, err := io.Copy(dst, ctxio.Reader{Ctx: e.ctx, R: io.LimitReader(f, h.Size)})
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if n != h.Size {
		return changed(p, fmt.Sprintf("file shrank while it was archived (%d of %d bytes)", n, h.Size))
	}
	var digest []byte
	if sum != nil {
		digest = sum.Sum(nil)
	}
	if err := rd.Check(e.ctx, 0, h.Size, digest); err != nil {
		return err
	}
	e.stats.Files++
	e.stats.Bytes += n
	return nil
}

func (e *exporter) symlink(d *fsguard.Root, name, p string, st *unix.Stat_t) error {
	target, err := d.Readlink(name)
	if err != nil {
		return vanished(p, err)
	}
	if err := e.header(&tar.Header{Name: p, Typeflag: tar.TypeSymlink, Linkname: target}, st); err != nil {
		return err
	}
	e.stats.Symlinks++
	return nil
}

// header completes h with the mode and mtime of st and writes it.
func (e *exporter) header(h *tar.Header, st *unix.Stat_t) error {
	h.Mode = int64(st.Mode & 0o7777)
	h.ModTime = mtimeOf(st)
	h.Format = tar.FormatPAX
	if err := e.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}

func mtimeOf(st *unix.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()).UTC() }

// changed types a tree that moved under the export, as a torn file read is typed.
func changed(p, reason string) error { return &stableread.Error{Path: p, Reason: reason} }

// vanished types the failure to open something that was just listed: it was removed or replaced
// by something else meanwhile.
func vanished(p string, err error) error {
	switch fsguard.CodeOf(err) {
	case fsguard.CodeNotFound, fsguard.CodeSymlinkRefused, fsguard.CodeNotDirectory, fsguard.CodeInvalidArgument:
		return changed(p, "entry removed or replaced while it was archived")
	}
	return err
}
