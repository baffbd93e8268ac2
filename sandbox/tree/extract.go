package tree

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/staging"
	"github.com/tetherhq/tether/sandbox/internal/tarstream"
)

// zstdMagic opens every zstd frame.
var zstdMagic = tarstream.ZstdMagic

// ExtractOptions controls Extract.
type ExtractOptions struct {
	// Dir is the directory, relative to the root, that receives the tree;
	// "" means the root itself. It must exist, and none of the stream's
	// top-level entries may exist in it yet.
	Dir string
	// MaxBytes, when positive, caps the total size of regular files.
	MaxBytes int64
	// Only, when set, is the one name the stream may hold at its top level: every entry must be
	// Only or beneath it. A receiver that asked for one tree takes nothing beside it.
	Only string
}

// Stats counts what Extract materialized.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
}

// Extract reads a tar stream (plain or zstd) and materializes regular
// files, directories and symlinks beneath opts.Dir in root. Hard links,
// devices and fifos are refused, as are entries that would escape the root
// or pass through a symlink. Everything is first written to a fresh
// staging directory inside opts.Dir and moved into place only after the
// whole stream succeeded; on any error the staging directory is removed and
// opts.Dir is left as it was.
func Extract(ctx context.Context, root *fsguard.Root, r io.Reader, opts ExtractOptions) (Stats, error) {
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	clean, err := fsguard.Clean(dir)
	if err != nil {
		return Stats{}, err
	}
	// Pinning the target directory makes staging, publishing and cleanup
	// all happen in the directory that was checked, even if its name is
	// swapped for a symlink meanwhile.
	target, err := root.OpenDir(clean)
	if err != nil {
		return Stats{}, fmt.Errorf("extract into %s: %w", clean, err)
	}
	defer target.Close()

	st, err := newStage(target)
	if err != nil {
		return Stats{}, fmt.Errorf("extract into %s: %w", clean, err)
	}
	defer st.Close()

	st.only = opts.Only
	stats, err := st.fill(ctx, r, opts.MaxBytes)
	if err != nil {
		return Stats{}, err
	}
	if err := st.Publish(ctx); err != nil {
		return Stats{}, fmt.Errorf("extract into %s: %w", clean, err)
	}
	return stats, nil
}

// typeRegOld is the pre-POSIX type flag for a regular file ('\x00'); old archivers still write it.
const typeRegOld = '\x00'

// entryMode keeps the permission bits only: setuid, setgid and sticky bits
// from an untrusted archive are dropped, as tar does for non-root users.
func entryMode(h *tar.Header) fs.FileMode { return fs.FileMode(h.Mode) & fs.ModePerm }

func invalid(name, msg string) error {
	return &fsguard.Error{Code: fsguard.CodeInvalidArgument, Path: name, Message: msg}
}

// extractEntry materializes one header into the stage.
func (s *stage) extractEntry(ctx context.Context, tr io.Reader, h *tar.Header, stats *Stats, maxBytes int64) error {
	name, err := entryName(h, s.only)
	if err != nil {
		return err
	}
	if name == "." {
		if h.Typeflag == tar.TypeDir {
			return nil // the target itself, which already exists
		}
		return invalid(h.Name, "entry names the target directory")
	}
	parent, _ := path.Split(name)
	if parent != "" {
		// Streams from other tools may omit parent entries, as tar allows.
		if err := s.Dir.MkdirAll(path.Clean(parent), 0o755); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := s.Dir.MkdirAll(name, 0o700); err != nil {
			return err
		}
		if s.SetDirMeta(name, staging.DirMeta{Mode: entryMode(h), MTime: h.ModTime}) {
			stats.Dirs++
		}
	case tar.TypeReg, typeRegOld:
		if maxBytes > 0 && stats.Bytes+h.Size > maxBytes {
			return invalid(name, fmt.Sprintf("archive holds more than %d bytes of files", maxBytes))
		}
		opts := fsguard.WriteOptions{MTime: h.ModTime, NoSync: true, Sparse: tarstream.IsSparse(h)}
		res, err := s.Dir.WriteFile(ctx, name, tr, entryMode(h), opts)
		if err != nil {
			return err
		}
		stats.Files++
		stats.Bytes += res.Bytes
	case tar.TypeSymlink:
		if err := checkLinkTarget(name, h.Linkname); err != nil {
			return err
		}
		if err := s.Dir.Symlink(h.Linkname, name); err != nil {
			return err
		}
		if err := s.Dir.Chtimes(name, time.Time{}, h.ModTime); err != nil {
			return err
		}
		stats.Symlinks++
	default:
		return refusedType(name, h.Typeflag)
	}
	return nil
}
