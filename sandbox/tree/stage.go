package tree

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

// StagePrefix starts the name of Extract's staging directories. A listing
// or snapshot may skip such names: they are never a finished tree.
const StagePrefix = ".tether-stage-"

// stage is a fresh directory inside the target that receives a whole
// stream before any of it is published.
type stage struct {
	target *fsguard.Root // pinned target directory
	name   string        // staging directory's name in target
	dir    *fsguard.Root // confined to the staging directory
	dirs   map[string]dirMeta
}

func newStage(target *fsguard.Root) (*stage, error) {
	var b [12]byte
	rand.Read(b[:])
	name := StagePrefix + hex.EncodeToString(b[:])
	if err := target.Mkdir(name, 0o700); err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	dir, err := target.OpenDir(name)
	if err != nil {
		target.RemoveAll(name)
		return nil, fmt.Errorf("open staging directory: %w", err)
	}
	return &stage{target: target, name: name, dir: dir, dirs: map[string]dirMeta{}}, nil
}

// close removes the staging directory and whatever is still in it: all of
// it after a failure, nothing but the empty directory after a publish.
func (s *stage) close() {
	s.dir.Close()
	s.target.RemoveAll(s.name)
}

// fill reads the whole stream into the staging directory.
func (s *stage) fill(ctx context.Context, r io.Reader, maxBytes int64) (Stats, error) {
	src, finish, err := decompressed(r)
	if err != nil {
		return Stats{}, err
	}
	var stats Stats
	counted := &countingReader{r: src}
	tr := tar.NewReader(counted)
	var entryEnd int64 // stream offset where the last entry's data ends
	for {
		if err := ctx.Err(); err != nil {
			finish()
			return Stats{}, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			// archive/tar reports a stream that simply stops between
			// entries as a clean end; only the two zero blocks of the
			// end-of-archive marker tell a whole archive from one cut at
			// an entry boundary.
			if counted.n < entryEnd+2*blockSize {
				finish()
				return Stats{}, fmt.Errorf("read archive: no end-of-archive marker: %w", io.ErrUnexpectedEOF)
			}
			break
		}
		if err != nil {
			finish()
			return Stats{}, fmt.Errorf("read archive: %w", err)
		}
		entryEnd = counted.n + paddedSize(h)
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if err := s.extractEntry(ctx, tr, h, &stats, maxBytes); err != nil {
			finish()
			return Stats{}, fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
	if err := finish(); err != nil {
		return Stats{}, err
	}
	return stats, nil
}

const blockSize = 512

// paddedSize is how many bytes of data archive/tar consumes after h's
// header blocks.
func paddedSize(h *tar.Header) int64 {
	switch h.Typeflag {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo, tar.TypeXGlobalHeader:
		return 0 // header-only types: archive/tar ignores their size field
	}
	return (h.Size + blockSize - 1) / blockSize * blockSize
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// publish sets directory metadata, makes the staged tree durable, and
// moves each top-level entry into the target with RENAME_NOREPLACE. If a
// move fails, the entries already moved are moved back, so the target ends
// as it began.
func (s *stage) publish(ctx context.Context) error {
	top, err := s.dir.ReadDir(".")
	if err != nil {
		return err
	}
	if err := s.applyDirMeta(func(name string) bool { return strings.Contains(name, "/") }); err != nil {
		return err
	}
	// Checking first spares a rollback in the common conflict case; the
	// NOREPLACE renames below still decide.
	for _, e := range top {
		if _, err := s.target.Lstat(e.Name()); err == nil {
			return &fsguard.Error{Code: fsguard.CodeExists, Path: e.Name(), Message: "already exists in the target directory"}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.dir.Sync(); err != nil {
		return err
	}
	var moved []string
	rollback := func(err error) error {
		for _, m := range moved {
			s.target.Rename(m, s.name+"/"+m, fsguard.RenameOptions{})
		}
		return err
	}
	for _, e := range top {
		if err := s.target.Rename(s.name+"/"+e.Name(), e.Name(), fsguard.RenameOptions{}); err != nil {
			return rollback(err)
		}
		moved = append(moved, e.Name())
	}
	// A directory being moved to a new parent needs write permission on
	// itself (its ".." changes), so top-level modes are set only now; so
	// are their mtimes, which nothing after this touches.
	if err := applyTopMeta(s.target, s.dirs); err != nil {
		return rollback(err)
	}
	if err := s.target.Sync(); err != nil {
		return rollback(err)
	}
	return nil
}

// applyDirMeta sets the mode and mtime of staged directories selected by
// keep, deepest first, so that setting a parent comes after everything
// that changes it.
func (s *stage) applyDirMeta(keep func(string) bool) error {
	names := make([]string, 0, len(s.dirs))
	for name := range s.dirs {
		if keep(name) {
			names = append(names, name)
		}
	}
	// A path sorts after every proper prefix of it, so reverse lexical
	// order visits children before their parents.
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, name := range names {
		if err := setMeta(s.dir, name, s.dirs[name]); err != nil {
			return err
		}
	}
	return nil
}

func applyTopMeta(target *fsguard.Root, dirs map[string]dirMeta) error {
	for name, m := range dirs {
		if !strings.Contains(name, "/") {
			if err := setMeta(target, name, m); err != nil {
				return err
			}
		}
	}
	return nil
}

func setMeta(root *fsguard.Root, name string, m dirMeta) error {
	if err := root.Chmod(name, m.mode); err != nil {
		return err
	}
	return root.Chtimes(name, time.Time{}, m.mtime)
}
