package snapshot

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/staging"
)

// RestoreOptions controls Restore.
type RestoreOptions struct {
	// Dir is the workspace-relative directory that receives the tree; ""
	// or "." is the root. It must be empty (names reserved for Tether's
	// temporary files aside) or absent, in which case its parent must
	// exist.
	Dir string
	// MaxEntries and MaxBytes, when positive, bound the archive: more
	// entries (the manifest aside) or more bytes of file content fail
	// with too_large before they are written. The controller passes the
	// totals of the receipt's manifest.
	MaxEntries int
	MaxBytes   int64
	// MaxApparentBytes, when positive, refuses a restore whose files' lengths add up to more
	// (a sparse file counts its whole length) with too_large; lengths beyond the free space
	// of the target's filesystem are refused with no_space. When MaxBytes announces the
	// total, both are checked before anything is written; otherwise each file is, before it
	// is written.
	MaxApparentBytes int64
	// PublishedAt, when set, receives the time just before the verified tree is published:
	// the runner's capture cache dates its knowledge of the files from then.
	PublishedAt *time.Time
}

// Restore reads a snapshot stream (zstd, or plain tar) to its end,
// extracting it through the guard into a staging directory while hashing
// every file, verifies every entry against the manifest (the last entry),
// and only then publishes the tree: by renaming the staging directory to
// Dir when Dir is absent, or by moving its top-level entries into the
// empty Dir (the root cannot be renamed, so there the staging directory
// lies inside it). Any failure removes the staged tree and leaves the
// target as it was.
//
// Permission bits and the sticky bit are restored; setuid and setgid are
// dropped, as tar does for an unprivileged user. Ownership is not
// restored: everything belongs to the restoring process.
func Restore(ctx context.Context, root *fsguard.Root, r io.Reader, opts RestoreOptions) (*Manifest, error) {
	if root == nil || r == nil {
		return nil, newError(CodeInvalidArgument, "", "restore needs a root and a reader", nil)
	}
	if opts.MaxEntries < 0 || opts.MaxBytes < 0 || opts.MaxApparentBytes < 0 {
		return nil, newError(CodeInvalidArgument, "", "negative limit", nil)
	}
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	clean, err := fsguard.Clean(dir)
	if err != nil {
		return nil, err
	}
	room, err := newSpace(root, opts.MaxApparentBytes)
	if err != nil {
		return nil, err
	}
	if announced := *room; opts.MaxBytes > 0 {
		if err := announced.take("", opts.MaxBytes); err != nil {
			return nil, err
		}
	}
	t, err := openTarget(root, clean)
	if err != nil {
		return nil, err
	}
	defer t.close()
	m, err := newScanner(ctx, opts.MaxEntries, opts.MaxBytes).run(r, &stageSink{ctx: ctx, st: t.stage, room: room})
	if err != nil {
		return nil, err
	}
	if opts.PublishedAt != nil {
		*opts.PublishedAt = time.Now()
	}
	if err := t.publish(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// target is where a restore lands and how it is published.
type target struct {
	pinned *fsguard.Root // the target directory, or its parent when absent
	stage  *staging.Stage
	name   string // the absent target's name in pinned; "" when it exists
}

func openTarget(root *fsguard.Root, clean string) (*target, error) {
	t := &target{}
	var err error
	if clean == "." {
		t.pinned, err = root.OpenDir(".")
	} else {
		parent, name := path.Split(clean)
		if parent == "" {
			parent = "."
		}
		pdir, perr := root.OpenDir(path.Clean(parent))
		if perr != nil {
			return nil, perr
		}
		_, err = pdir.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			t.pinned, t.name, err = pdir, name, nil
		case err != nil:
			pdir.Close()
			return nil, err
		default:
			t.pinned, err = pdir.OpenDir(name)
			pdir.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	if t.name == "" {
		if err := mustBeEmpty(t.pinned, clean); err != nil {
			t.pinned.Close()
			return nil, err
		}
	}
	if t.stage, err = staging.New(t.pinned); err != nil {
		t.pinned.Close()
		return nil, err
	}
	return t, nil
}

func mustBeEmpty(d *fsguard.Root, clean string) error {
	ents, err := d.ReadDir(".")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !reserved(e.Name()) {
			return newError(CodeExists, clean, "restore target is not empty (it holds "+e.Name()+")", nil)
		}
	}
	return nil
}

func (t *target) publish(ctx context.Context) error {
	if t.name != "" {
		return t.stage.PublishAs(ctx, t.name, 0o755)
	}
	return t.stage.Publish(ctx)
}

func (t *target) close() {
	t.stage.Close()
	t.pinned.Close()
}

// stageSink writes checked entries into the staging directory. The
// scanner has already made sure each parent is a directory it created, so
// nothing here resolves through a symlink (and the guard would refuse
// it).
type stageSink struct {
	ctx  context.Context
	st   *staging.Stage
	room *space
}

// restoreMode keeps the permission and sticky bits.
func restoreMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func (s *stageSink) dir(e *Entry) error {
	if err := s.st.Dir.Mkdir(e.Path, 0o700); err != nil {
		return err
	}
	s.st.SetDirMeta(e.Path, staging.DirMeta{Mode: restoreMode(e.Mode), MTime: e.MTime})
	return nil
}

func (s *stageSink) file(e *Entry, r io.Reader) (string, int64, error) {
	if err := s.room.take(e.Path, e.Size); err != nil {
		return "", 0, err
	}
	// An archived name like a temporary file's is the agent's file and comes back as it was.
	// In place: the staging directory is private and published whole, so a file needs no
	// temporary name, hold or rename of its own.
	opts := fsguard.WriteOptions{MTime: e.MTime, NoSync: true, ReservedName: true, InPlace: true}
	if e.Sparse {
		opts.Sparse, opts.Hash = true, ContentHash(*e)
	}
	res, err := s.st.Dir.WriteFile(s.ctx, e.Path, r, restoreMode(e.Mode), opts)
	return res.SHA256, res.Bytes, err
}

func (s *stageSink) symlink(e *Entry) error {
	if err := s.st.Dir.Symlink(e.LinkTarget, e.Path); err != nil {
		return err
	}
	return s.st.Dir.Chtimes(e.Path, time.Time{}, e.MTime)
}
