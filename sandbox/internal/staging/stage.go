// Package staging materializes a whole tree in a fresh directory beside
// (or inside) its destination and publishes it only once it is complete:
// by renaming the staging directory into place, or by moving its
// top-level entries into an existing directory with RENAME_NOREPLACE and
// moving them back if any move fails. Closing an unpublished stage removes
// everything in it, so a failure leaves nothing behind.
package staging

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

// Prefix starts the name of every staging directory. A listing or
// snapshot may skip such names: they are never a finished tree.
const Prefix = ".tether-stage-"

// DirMeta is applied to a staged directory after its contents exist,
// because creating entries updates the directory's mtime and a read-only
// mode would stop them being created at all.
type DirMeta struct {
	Mode  fs.FileMode
	MTime time.Time
}

// Stage is a fresh directory in a pinned parent that receives a whole tree
// before any of it is published.
type Stage struct {
	parent *fsguard.Root // pinned directory holding the stage
	name   string        // the staging directory's name in parent
	Dir    *fsguard.Root // confined to the staging directory
	dirs   map[string]DirMeta
	// unhold ends the parent's hold on the staging directory (fsguard.Holds): until Close, a
	// snapshot of the tree leaves it out as the runner's own, unfinished work.
	unhold func()
}

// New creates a staging directory (mode 0700) in parent.
func New(parent *fsguard.Root) (*Stage, error) {
	var b [12]byte
	rand.Read(b[:])
	name := Prefix + hex.EncodeToString(b[:])
	unhold, err := parent.MkdirHeld(name, 0o700)
	if err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	dir, err := parent.OpenDir(name)
	if err != nil {
		parent.RemoveAll(name)
		unhold()
		return nil, fmt.Errorf("open staging directory: %w", err)
	}
	return &Stage{parent: parent, name: name, Dir: dir, dirs: map[string]DirMeta{}, unhold: unhold}, nil
}

// Name is the staging directory's name in its parent.
func (s *Stage) Name() string { return s.name }

// SetDirMeta records the metadata the staged directory name (relative to
// the stage) receives at publish time. It reports whether name was new.
func (s *Stage) SetDirMeta(name string, m DirMeta) bool {
	_, seen := s.dirs[name]
	s.dirs[name] = m
	return !seen
}

// Close removes the staging directory and whatever is still in it: all of
// it after a failure, nothing but the empty directory after Publish, and
// nothing at all after PublishAs.
func (s *Stage) Close() {
	s.Dir.Close()
	s.parent.RemoveAll(s.name)
	s.unhold()
}

// Publish sets directory metadata, makes the staged tree durable, and
// moves each top-level entry into the parent with RENAME_NOREPLACE. If a
// move fails, the entries already moved are moved back, so the parent
// ends as it began.
func (s *Stage) Publish(ctx context.Context) error {
	top, err := s.Dir.ReadDir(".")
	if err != nil {
		return err
	}
	if err := s.applyDirMeta(func(name string) bool { return strings.Contains(name, "/") }); err != nil {
		return err
	}
	// Checking first spares a rollback in the common conflict case; the
	// NOREPLACE renames below still decide.
	for _, e := range top {
		if _, err := s.parent.Lstat(e.Name()); err == nil {
			return &fsguard.Error{Code: fsguard.CodeExists, Path: e.Name(), Message: "already exists in the target directory"}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Dir.Sync(); err != nil {
		return err
	}
	var moved []string
	rollback := func(err error) error {
		for _, m := range moved {
			s.parent.Rename(m, s.name+"/"+m, fsguard.RenameOptions{})
		}
		return err
	}
	for _, e := range top {
		if err := s.parent.Rename(s.name+"/"+e.Name(), e.Name(), fsguard.RenameOptions{}); err != nil {
			return rollback(err)
		}
		moved = append(moved, e.Name())
	}
	// A directory being moved to a new parent needs write permission on
	// itself (its ".." changes), so top-level modes are set only now; so
	// are their mtimes, which nothing after this touches.
	for name, m := range s.dirs {
		if !strings.Contains(name, "/") {
			if err := setMeta(s.parent, name, m); err != nil {
				return rollback(err)
			}
		}
	}
	if err := s.parent.Sync(); err != nil {
		return rollback(err)
	}
	return nil
}

// PublishAs sets directory metadata (mode for the staging directory
// itself), makes the staged tree durable and renames the staging directory
// to name in the parent with RENAME_NOREPLACE. It is atomic: name either
// does not appear or appears complete.
func (s *Stage) PublishAs(ctx context.Context, name string, mode fs.FileMode) error {
	if err := s.applyDirMeta(func(string) bool { return true }); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Dir.Sync(); err != nil {
		return err
	}
	// A rename within one parent needs no write permission on the
	// directory itself, so its final mode can be set first.
	if err := s.parent.Chmod(s.name, mode); err != nil {
		return err
	}
	if err := s.parent.Rename(s.name, name, fsguard.RenameOptions{}); err != nil {
		return err
	}
	if err := s.parent.Sync(); err != nil {
		s.parent.Rename(name, s.name, fsguard.RenameOptions{})
		return err
	}
	return nil
}

// applyDirMeta sets the mode and mtime of staged directories selected by
// keep, deepest first, so that setting a parent comes after everything
// that changes it.
func (s *Stage) applyDirMeta(keep func(string) bool) error {
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
		if err := setMeta(s.Dir, name, s.dirs[name]); err != nil {
			return err
		}
	}
	return nil
}

func setMeta(root *fsguard.Root, name string, m DirMeta) error {
	if err := root.Chmod(name, m.Mode); err != nil {
		return err
	}
	return root.Chtimes(name, time.Time{}, m.MTime)
}
