package fsguard

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// openBeneath resolves the cleaned relative path rel beneath dirfd and
// opens it with flags. It never follows a symlink, at any component,
// including the last: a final symlink is refused even for O_PATH opens,
// which the kernel would otherwise hand back as a descriptor to the link.
func (r *Root) openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	var fd int
	var err error
	if r.walk.Load() {
		fd, err = walkOpen(dirfd, rel, flags, mode)
	} else {
		fd, err = openat2Beneath(dirfd, rel, flags, mode)
		if err == unix.ENOSYS {
			// A seccomp policy can change under a running process (a
			// sandbox tightening itself); keep working with the walk.
			r.walk.Store(true)
			fd, err = walkOpen(dirfd, rel, flags, mode)
		} else if err == unix.ENOTDIR || err == unix.ELOOP {
			// openat2 does not say which component was the symlink or
			// the non-directory; the walk does, and errs the same way.
			first := err
			fd, err = walkOpen(dirfd, rel, flags, mode)
			if err == nil {
				// The tree changed between the two attempts; the first
				// answer stands.
				unix.Close(fd)
				fd, err = -1, newError(codeForErrno(first), rel, "changed during resolution", first)
			}
		}
	}
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return -1, err
		}
		return -1, mapErrno("open", rel, err)
	}
	if flags&unix.O_PATH != 0 && flags&unix.O_DIRECTORY == 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, mapErrno("fstat", rel, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, newError(CodeSymlinkRefused, rel, "final component is a symlink", unix.ELOOP)
		}
	}
	return fd, nil
}

func codeForErrno(err error) string {
	if err == unix.ELOOP {
		return CodeSymlinkRefused
	}
	return CodeNotDirectory
}

func openat2Beneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		// EAGAIN: the kernel saw a concurrent rename and would rather the
		// caller retried than risk a wrong answer.
		if (err == unix.EAGAIN || err == unix.EINTR) && tries < 64 {
			continue
		}
		return fd, err
	}
}

// walkOpen opens rel one component at a time, each relative to the
// descriptor of the previous one, with O_NOFOLLOW. Holding descriptors
// means a component swapped for a symlink after it was opened changes
// nothing: the walk is already inside the real directory.
func walkOpen(dirfd int, rel string, flags int, mode uint32) (int, error) {
	if rel == "." {
		return retryEINTR(func() (int, error) { return unix.Openat(dirfd, ".", flags, mode) })
	}
	elems := strings.Split(rel, "/")
	cur := dirfd
	closeCur := func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}
	defer func() { closeCur() }()
	for i, elem := range elems[:len(elems)-1] {
		next, err := retryEINTR(func() (int, error) {
			return unix.Openat(cur, elem, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		if err != nil {
			return -1, classify(cur, elem, rel, strings.Join(elems[:i+1], "/"), err)
		}
		closeCur()
		cur = next
	}
	last := elems[len(elems)-1]
	fd, err := retryEINTR(func() (int, error) { return unix.Openat(cur, last, flags, mode) })
	if err != nil {
		return -1, classify(cur, last, rel, rel, err)
	}
	return fd, nil
}

// classify names the component at fault when opening name in dirfd failed
// with an errno that does not tell a symlink from a non-directory.
func classify(dirfd int, name, rel, component string, err error) error {
	if err != unix.ENOTDIR && err != unix.ELOOP {
		return mapErrno("open", rel, err)
	}
	var st unix.Stat_t
	if serr := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return newError(CodeSymlinkRefused, rel, "component "+component+" is a symlink", unix.ELOOP)
	}
	if err == unix.ELOOP {
		return newError(CodeSymlinkRefused, rel, "symlink refused", err)
	}
	return newError(CodeNotDirectory, rel, "component "+component+" is not a directory", err)
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		fd, err := f()
		if err != unix.EINTR {
			return fd, err
		}
	}
}
