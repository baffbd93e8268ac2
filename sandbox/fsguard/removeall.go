package fsguard

import (
	"golang.org/x/sys/unix"
)

// RemoveAll removes rel and everything below it. It descends through
// directory descriptors opened with O_NOFOLLOW and unlinks each child by
// name inside its pinned parent, so a symlink in the tree is removed as a
// link and what it points to is never touched. A missing rel is not an
// error. The root itself cannot be removed.
func (r *Root) RemoveAll(rel string) error {
	return r.withParent(rel, func(pfd int, name, clean string) error {
		return mapErrno("remove", clean, removeAllAt(pfd, name))
	})
}

// removeAllAt keeps retrying because a concurrent writer may recreate
// entries; it gives up after a bounded number of rounds rather than spin.
func removeAllAt(pfd int, name string) error {
	var err error
	for round := 0; round < 8; round++ {
		err = unix.Unlinkat(pfd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR {
			return err
		}
		if err = emptyDir(pfd, name); err != nil {
			if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
				continue // replaced by a non-directory meanwhile
			}
			return err
		}
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.ENOTEMPTY && err != unix.EEXIST && err != unix.ENOTDIR {
			return err
		}
	}
	return err
}

func emptyDir(pfd int, name string) error {
	fd, err := openDirForRemoval(pfd, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		names, err := readNames(fd)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		for _, child := range names {
			if err := removeAllAt(fd, child); err != nil {
				return err
			}
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return err
		}
	}
}

// openDirForRemoval opens a directory for listing and makes sure its owner
// can list and unlink in it: a tree extracted from an archive may hold
// directories of mode 0555 or 0000, which would otherwise be impossible to
// clean up without root.
func openDirForRemoval(pfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(pfd, name, flags, 0)
	if err == unix.EACCES {
		pathfd, perr := unix.Openat(pfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if perr != nil {
			return -1, perr
		}
		perr = chmodFD(pathfd, 0o700)
		unix.Close(pathfd)
		if perr != nil {
			return -1, err
		}
		fd, err = unix.Openat(pfd, name, flags, 0)
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&0o300 != 0o300 {
		if err := unix.Fchmod(fd, st.Mode&0o7777|0o700); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}
