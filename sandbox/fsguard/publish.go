package fsguard

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// PublishOptions controls Publish.
type PublishOptions struct {
	// IfSHA256, when set, replaces only a regular file whose content has this SHA-256
	// (CodeConflict otherwise, nothing changed); unset, the destination must not exist.
	IfSHA256 string
}

// Publish moves the finished file from (say, one staged and synced in a private directory of
// the same root) to its destination by one rename: a new name unless IfSHA256 names the bytes
// it may replace, checked as late as possible, as WriteFile does. The caller makes it durable
// (Sync) once a batch is published.
func (r *Root) Publish(from, to string, opts PublishOptions) error {
	return r.withParent(from, func(fpd int, fname, _ string) error {
		return r.withParentHeld(to, func(tpd int, tname, tclean string) error {
			if strings.HasPrefix(tname, TempPrefix) {
				return newError(CodeInvalidArgument, tclean, "name is reserved for temporary files", nil)
			}
			var err error
			if opts.IfSHA256 != "" {
				if err := expectContent(tpd, tname, tclean, opts.IfSHA256); err != nil {
					return err
				}
				err = unix.Renameat(fpd, fname, tpd, tname)
			} else {
				err = renameNoReplace(fpd, fname, tpd, tname)
			}
			switch err {
			case nil:
				return nil
			case unix.EISDIR, unix.ENOTEMPTY, unix.EEXIST:
				return newError(CodeExists, tclean, "destination exists", err)
			}
			return mapErrno("rename", tclean, err)
		})
	})
}

// Adopt moves the finished file at from — an absolute path outside the root that only the
// caller writes (a runner's private state), already synced — to rel by one rename: where
// nothing is, or with replace over a regular file (never a directory or a symlink). Across
// filesystems it fails with an error wrapping unix.EXDEV, and the caller copies instead.
func (r *Root) Adopt(from, rel string, replace bool) error {
	return r.withParent(rel, func(pfd int, name, clean string) error {
		if strings.HasPrefix(name, TempPrefix) {
			return newError(CodeInvalidArgument, clean, "name is reserved for temporary files", nil)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			switch {
			case st.Mode&unix.S_IFMT == unix.S_IFDIR:
				return newError(CodeExists, clean, "a directory exists at the destination", nil)
			case st.Mode&unix.S_IFMT == unix.S_IFLNK:
				return newError(CodeSymlinkRefused, clean, "destination is a symlink", unix.ELOOP)
			case !replace:
				return newError(CodeExists, clean, "destination exists", unix.EEXIST)
			}
		}
		var err error
		if replace {
			err = unix.Renameat(unix.AT_FDCWD, from, pfd, name)
		} else {
			err = renameNoReplace(unix.AT_FDCWD, from, pfd, name)
		}
		switch err {
		case nil:
		case unix.EXDEV:
			return fmt.Errorf("adopt %s: %w", clean, err)
		case unix.EISDIR, unix.ENOTEMPTY, unix.EEXIST:
			return newError(CodeExists, clean, "destination exists", err)
		default:
			return mapErrno("rename", clean, err)
		}
		dfd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return mapErrno("open parent", clean, err)
		}
		defer unix.Close(dfd)
		if err := unix.Fsync(dfd); err != nil {
			return fmt.Errorf("fsync directory of %s: %w", clean, err)
		}
		return nil
	})
}
