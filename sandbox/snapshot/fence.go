package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/internal/ctxio"
	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

// The fence makes a capture one instant of the tree. The walk checks each entry on its own
// (stable across its own read), which lets a file read early and one read late come from
// different moments: a writer that updates a.txt then z.txt can be caught with a old and z new.
// So after the walk every archived entry (the root, directories, files, symlinks) is looked at
// again: if none changed between its read and this second look, then at the instant the walk
// ended — after every read and before every second look — the tree held exactly what was
// archived. An entry that did change fails the capture with changed_during_capture; the caller
// captures again from the start (nothing of the failed attempt may be published).
//
// "Unchanged" is decided by the stamp (inode, size, mtime, ctime) when it can be: a change after
// the read moves ctime, unless the entry had last changed within one coarse timestamp tick of
// its read, when a change in that same tick can leave every time equal. Such racy entries are
// compared by content as well (as Git does for racily clean index entries): a file is read and
// hashed again, a directory is listed again and its names compared with those archived. The
// content comparison proves equality at the two looks, not in between: a file rewritten and
// rewritten back to the same bytes within one tick passes, and that is the one case left.

// fenceMark is what the fence re-checks of one archived entry.
type fenceMark struct {
	entry int // index in the manifest's entries; rootMark for the workspace root
	stamp stableread.Stamp
	racy  bool
}

const rootMark = -1

// fence collects the marks of one capture attempt.
type fence struct {
	marks []fenceMark
}

// add records entry (an index in the manifest's entries, or rootMark) as it was read.
func (f *fence) add(entry int, st stableread.Stamp, racy bool) {
	f.marks = append(f.marks, fenceMark{entry: entry, stamp: st, racy: racy})
}

// verify looks at every marked entry again, through root, and fails with
// changed_during_capture at the first that changed since its read. buf is a read buffer.
func (f *fence) verify(ctx context.Context, root *fsguard.Root, m *Manifest, buf []byte) error {
	names := f.racyDirNames(m)
	dirs := fenceDirs{root: root, open: map[string]*fsguard.Root{}}
	defer dirs.close()
	for _, mk := range f.marks {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, typ := ".", TypeDir
		var e *Entry
		if mk.entry != rootMark {
			e = &m.Entries[mk.entry]
			p, typ = e.Path, e.Type
		}
		st, err := dirs.lstat(p)
		if err != nil {
			if isGone(err) {
				return fenceChanged(p, "was removed or replaced")
			}
			return err
		}
		if !stableread.Unchanged(mk.stamp, stableread.FromStat(st)) {
			return fenceChanged(p, "changed (its size, times or inode moved)")
		}
		if !mk.racy {
			continue
		}
		switch typ {
		case TypeFile:
			err = sameContent(ctx, root, e, mk.stamp, buf)
		case TypeDir:
			err = sameNames(root, p, names[p])
		}
		// A symlink's target cannot change in place: a new one is a new inode.
		if err != nil {
			return err
		}
	}
	return nil
}

// racyDirNames lists, for each racy directory, the names the capture saw in it: its archived
// children and those it skipped.
func (f *fence) racyDirNames(m *Manifest) map[string][]string {
	out := map[string][]string{}
	for _, mk := range f.marks {
		switch {
		case !mk.racy:
		case mk.entry == rootMark:
			out["."] = []string{}
		case m.Entries[mk.entry].Type == TypeDir:
			out[m.Entries[mk.entry].Path] = []string{}
		}
	}
	if len(out) == 0 {
		return out
	}
	seen := func(p string) {
		if list, ok := out[path.Dir(p)]; ok {
			out[path.Dir(p)] = append(list, path.Base(p))
		}
	}
	for i := range m.Entries {
		seen(m.Entries[i].Path)
	}
	for i := range m.Skipped {
		seen(m.Skipped[i].Path)
	}
	return out
}

// sameContent reads the file of e again and compares its SHA-256 with the archived one.
func sameContent(ctx context.Context, root *fsguard.Root, e *Entry, want stableread.Stamp, buf []byte) error {
	f, err := root.Open(e.Path)
	if err != nil {
		if isGone(err) {
			return fenceChanged(e.Path, "was removed or replaced")
		}
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("fstat %s: %w", e.Path, err)
	}
	if !stableread.Unchanged(want, stableread.FromStat(&st)) {
		return fenceChanged(e.Path, "changed (its size, times or inode moved)")
	}
	if e.Sparse {
		got, err := sparseDigest(ctx, f, want.Size, buf)
		if err != nil {
			return fmt.Errorf("read %s again: %w", e.Path, err)
		}
		if got != e.SHA256 {
			return fenceChanged(e.Path, "changed (its content differs from what was archived)")
		}
		return nil
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.LimitReader(ctxio.Reader{Ctx: ctx, R: f}, want.Size+1), buf)
	if err != nil {
		return fmt.Errorf("read %s again: %w", e.Path, err)
	}
	if n != want.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return fenceChanged(e.Path, "changed (its content differs from what was archived)")
	}
	return nil
}

// sameNames lists the directory p again and compares its names with those the capture saw.
func sameNames(root *fsguard.Root, p string, want []string) error {
	ents, err := root.ReadDir(p)
	if err != nil {
		if isGone(err) {
			return fenceChanged(p, "was removed or replaced")
		}
		return err
	}
	got := make([]string, len(ents))
	for i, e := range ents {
		got[i] = e.Name()
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fenceChanged(p, "changed (an entry was added, removed or renamed in it)")
	}
	return nil
}

func fenceChanged(p, what string) error {
	return newError(CodeChangedDuringCapture, p, what+" after it was archived, before the capture ended: the archive would not be one instant of the tree", nil)
}

// isGone says whether err is the guard's answer for an entry that is no longer there as it was.
func isGone(err error) bool {
	switch fsguard.CodeOf(err) {
	case fsguard.CodeNotFound, fsguard.CodeSymlinkRefused, fsguard.CodeNotDirectory, fsguard.CodeInvalidArgument:
		return true
	}
	return errors.Is(err, unix.ENOENT)
}

// fenceDirs stats the fence's entries through their directories, each opened (guarded) once
// rather than resolved again for every entry: three syscalls per entry become one. A directory
// is opened at its first child, which comes after the directory's own mark in walk order, so
// the directory was proved to be at its path, unchanged, when the descriptor was taken; the
// entries stat'ed through it then prove the tree as it was when the fence began, as resolving
// every path would.
type fenceDirs struct {
	root *fsguard.Root
	open map[string]*fsguard.Root
}

// maxFenceDirs bounds the directories held open; past it they are all closed and reopened as
// needed (walk order visits a directory's entries close together, so this rarely happens).
const maxFenceDirs = 256

func (d *fenceDirs) lstat(p string) (*unix.Stat_t, error) {
	dir, name := path.Split(p)
	if dir == "" || p == "." {
		return lstat(d.root, p)
	}
	dir = dir[:len(dir)-1]
	sub, ok := d.open[dir]
	if !ok {
		if len(d.open) >= maxFenceDirs {
			d.close()
		}
		var err error
		if sub, err = d.root.OpenDir(dir); err != nil {
			return nil, err
		}
		d.open[dir] = sub
	}
	return lstat(sub, name)
}

func (d *fenceDirs) close() {
	for k, sub := range d.open {
		_ = sub.Close()
		delete(d.open, k)
	}
}
