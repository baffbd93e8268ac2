package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/tetherhq/tether/plugins/provider"
)

// checkPrivate refuses anything but a real directory owned by us with no
// group or other permissions. Runners start with the controller's
// privileges from these directories, so a planted or shared one would let
// another user steer or read what runs there.
func checkPrivate(path string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return provider.Errorf(provider.CodeSymlinkRefused, "%s is a symlink", path)
	}
	if !fi.IsDir() {
		return provider.Errorf(provider.CodeFailedPrecondition, "%s is not a directory", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return provider.Errorf(provider.CodeFailedPrecondition, "%s: cannot read owner", path)
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return provider.Errorf(provider.CodeFailedPrecondition, "%s is owned by uid %d, not %d", path, st.Uid, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return provider.Errorf(provider.CodeFailedPrecondition,
			"%s has mode %04o; it must not be accessible to group or others (chmod 700)", path, perm)
	}
	return nil
}

// lstatPrivate is checkPrivate on the path itself, never its symlink target.
func lstatPrivate(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return provider.Errorf(provider.CodeFailedPrecondition, "%s: %v", path, err)
	}
	return checkPrivate(path, fi)
}

// ensurePrivateDir creates dir (and missing parents) 0700 and checks it.
func ensurePrivateDir(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return provider.Errorf(provider.CodeProviderFailed, "create state dir: %v", err)
		}
	}
	return lstatPrivate(dir)
}

// checkAllocationDirs vets every entry a previous run left in the state dir.
// Symlinks are refused outright; Stop and Destroy would otherwise act on
// whatever they point at.
func checkAllocationDirs(stateDir string) error {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "read state dir: %v", err)
	}
	for _, e := range entries {
		path := filepath.Join(stateDir, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			return provider.Errorf(provider.CodeSymlinkRefused, "%s is a symlink", path)
		}
		if !e.IsDir() {
			continue
		}
		if err := lstatPrivate(path); err != nil {
			return err
		}
	}
	return nil
}

// mkdirPrivate makes one new directory. mkdir(2) never follows a symlink in
// the last element (it fails with EEXIST), so a planted link is reported,
// not written through.
func mkdirPrivate(path string) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return provider.Errorf(provider.CodeSymlinkRefused, "%s is a symlink", path)
			}
			return provider.Errorf(provider.CodeConflict, "%s already exists", path)
		}
		return provider.Errorf(provider.CodeProviderFailed, "mkdir %s: %v", path, err)
	}
	// The umask can only remove bits, but a 0700 that became 0500 would
	// break the runner; set the mode explicitly.
	if err := os.Chmod(path, 0o700); err != nil {
		return provider.Errorf(provider.CodeProviderFailed, "chmod %s: %v", path, err)
	}
	return lstatPrivate(path)
}

// openNoFollow opens a file inside an allocation dir without following a
// symlink a workspace process may have put there (it runs as our uid).
func openNoFollow(path string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
}

// removeTree removes dir, first making read-only directories writable:
// workspaces routinely hold them (the Go module cache is 0555) and
// RemoveAll alone would stop at the first one.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			// WalkDir reports symlinks as non-dirs, so this chmods only
			// real directories inside the tree.
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// lstatOwnedDir refuses anything but a real directory (never a symlink) owned by uid.
func lstatOwnedDir(path string, uid int) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return provider.Errorf(provider.CodeFailedPrecondition, "%s: %v", path, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return provider.Errorf(provider.CodeSymlinkRefused, "%s is a symlink", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != uid {
		return provider.Errorf(provider.CodeFailedPrecondition, "%s is not a directory owned by uid %d", path, uid)
	}
	return nil
}
