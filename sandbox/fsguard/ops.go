package fsguard

import (
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// withParent resolves the parent directory of rel and hands fn its
// descriptor and the final name. Operations on a single name relative to a
// pinned directory (mkdirat, symlinkat, unlinkat, renameat2, fstatat and
// utimensat with AT_SYMLINK_NOFOLLOW, readlinkat) never follow a symlink
// at that name, so the parent is the only thing that needs resolving.
func (r *Root) withParent(rel string, fn func(pfd int, name, clean string) error) error {
	clean, err := Clean(rel)
	if err != nil {
		return err
	}
	if clean == "." {
		return newError(CodeInvalidArgument, rel, "operation needs a path below the root", nil)
	}
	root, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.release()
	dir, name := split(clean)
	if dir == "." {
		// The root's own descriptor is the parent (an O_PATH directory like the one opened
		// below), and name is one component: nothing to resolve, two syscalls saved.
		return fn(root, name, clean)
	}
	pfd, err := r.openBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return withPath(err, clean)
	}
	defer unix.Close(pfd)
	return fn(pfd, name, clean)
}

// withPath makes a typed error name the path the caller asked about rather
// than the prefix at which resolution stopped.
func withPath(err error, p string) error {
	if e, ok := err.(*Error); ok && e.Path != p {
		c := *e
		if c.Message == "" || c.Message == "open" {
			c.Message = "resolving " + c.Path
		}
		c.Path = p
		return &c
	}
	return err
}

// withFD resolves rel itself and hands fn a descriptor opened with flags.
func (r *Root) withFD(rel string, flags int, fn func(fd int, clean string) error) error {
	clean, err := Clean(rel)
	if err != nil {
		return err
	}
	root, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.release()
	fd, err := r.openBeneath(root, clean, flags, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd, clean)
}

// OpenDir returns a Root confined to the directory rel. The new Root is
// independent of r and must be closed on its own.
func (r *Root) OpenDir(rel string) (*Root, error) {
	var sub *Root
	err := r.withFD(rel, unix.O_PATH|unix.O_DIRECTORY, func(fd int, clean string) error {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return mapErrno("dup", clean, err)
		}
		sub = r.subRoot(dup, path.Join(r.name, clean))
		return nil
	})
	return sub, err
}

// Lstat describes rel without following a final symlink. Sys() returns a
// *unix.Stat_t.
func (r *Root) Lstat(rel string) (fs.FileInfo, error) {
	if c, err := Clean(rel); err == nil && c == "." {
		fi := &fileInfo{name: "."}
		root, err := r.acquire()
		if err != nil {
			return nil, err
		}
		defer r.release()
		return fi, mapErrno("fstat", ".", unix.Fstat(root, &fi.st))
	}
	var fi *fileInfo
	err := r.withParent(rel, func(pfd int, name, clean string) error {
		fi = &fileInfo{name: name}
		return mapErrno("lstat", clean, unix.Fstatat(pfd, name, &fi.st, unix.AT_SYMLINK_NOFOLLOW))
	})
	if err != nil {
		return nil, err
	}
	return fi, nil
}

// Open opens a regular file for reading. A final symlink is refused; so are
// fifos and devices, whose open alone can block or act, and directories:
// os.File's DirEntry.Info would look entries up by name from the working
// directory, so listings go through ReadDir instead.
func (r *Root) Open(rel string) (*os.File, error) {
	f, _, err := r.OpenStat(rel)
	return f, err
}

// OpenStat is Open that also returns the fstat the file was checked with (Sys is a
// *unix.Stat_t), which saves a caller that needs it a syscall: a capture opens every file of the
// tree.
func (r *Root) OpenStat(rel string) (*os.File, fs.FileInfo, error) {
	clean, err := Clean(rel)
	if err != nil {
		return nil, nil, err
	}
	root, err := r.acquire()
	if err != nil {
		return nil, nil, err
	}
	defer r.release()
	fd, err := r.openBeneath(root, clean, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi := &fileInfo{name: path.Base(clean)}
	st := &fi.st
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return nil, nil, mapErrno("fstat", clean, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, nil, newError(CodeInvalidArgument, clean, "not a regular file", nil)
	}
	// O_NONBLOCK only kept the open from blocking on a fifo swapped in for the file; a regular
	// file's reads never block, and with the flag set os.File would try to add it to the poller.
	// F_SETFL with 0 clears it (the open set none of the other flags F_SETFL changes).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		unix.Close(fd)
		return nil, nil, mapErrno("fcntl", clean, err)
	}
	return os.NewFile(uintptr(fd), clean), fi, nil
}

// ReadDir lists the directory rel in lexical order. Entries carry their
// lstat results, taken through the directory's descriptor.
func (r *Root) ReadDir(rel string) ([]fs.DirEntry, error) {
	var out []fs.DirEntry
	err := r.withFD(rel, unix.O_RDONLY|unix.O_DIRECTORY, func(fd int, clean string) error {
		names, err := readNames(fd)
		if err != nil {
			return mapErrno("readdir", clean, err)
		}
		out, err = sortedEntries(fd, names)
		return mapErrno("readdir", clean, err)
	})
	return out, err
}

// Readlink returns a symlink's target verbatim.
func (r *Root) Readlink(rel string) (string, error) {
	var target string
	err := r.withParent(rel, func(pfd int, name, clean string) error {
		for size := 256; ; size *= 2 {
			buf := make([]byte, size)
			n, err := unix.Readlinkat(pfd, name, buf)
			if err != nil {
				if err == unix.EINVAL {
					return newError(CodeInvalidArgument, clean, "not a symlink", err)
				}
				return mapErrno("readlink", clean, err)
			}
			if n < size {
				target = string(buf[:n])
				return nil
			}
		}
	})
	return target, err
}

// Mkdir creates one directory. Like os.Mkdir the mode is subject to the
// umask; Chmod sets it exactly.
func (r *Root) Mkdir(rel string, mode fs.FileMode) error {
	return r.withParent(rel, func(pfd int, name, clean string) error {
		return mapErrno("mkdir", clean, unix.Mkdirat(pfd, name, unixPerm(mode)))
	})
}

// MkdirAll creates rel and any missing parents. Each component is created
// with mkdirat and then opened with the guard, so a symlink planted at a
// component (before or during the call) is refused, never followed.
func (r *Root) MkdirAll(rel string, mode fs.FileMode) error {
	clean, err := Clean(rel)
	if err != nil {
		return err
	}
	root, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.release()
	fd, err := r.mkdirAll(root, clean, mode)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// mkdirAll returns an O_PATH descriptor of the directory clean.
func (r *Root) mkdirAll(root int, clean string, mode fs.FileMode) (int, error) {
	cur, err := unix.FcntlInt(uintptr(root), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil || clean == "." {
		return cur, mapErrno("dup", clean, err)
	}
	done := ""
	for _, elem := range strings.Split(clean, "/") {
		done = path.Join(done, elem)
		next, err := r.openBeneath(cur, elem, unix.O_PATH|unix.O_DIRECTORY, 0)
		if CodeOf(err) == CodeNotFound {
			if merr := unix.Mkdirat(cur, elem, unixPerm(mode)); merr != nil && merr != unix.EEXIST {
				unix.Close(cur)
				return -1, mapErrno("mkdir", done, merr)
			}
			next, err = r.openBeneath(cur, elem, unix.O_PATH|unix.O_DIRECTORY, 0)
		}
		unix.Close(cur)
		if err != nil {
			if e, ok := err.(*Error); ok {
				c := *e
				c.Path, c.Message = clean, "at "+done
				switch c.Code {
				case CodeSymlinkRefused:
					c.Message = "component " + done + " is a symlink"
				case CodeNotDirectory:
					c.Message = "component " + done + " is not a directory"
				}
				err = &c
			}
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// Symlink creates rel as a symlink to target. The target is stored
// verbatim and never resolved: it may point anywhere, because nothing in
// this package will follow it.
func (r *Root) Symlink(target, rel string) error {
	if target == "" {
		return newError(CodeInvalidArgument, rel, "empty symlink target", nil)
	}
	return r.withParent(rel, func(pfd int, name, clean string) error {
		return mapErrno("symlink", clean, unix.Symlinkat(target, pfd, name))
	})
}

// Remove removes a file, symlink or empty directory.
func (r *Root) Remove(rel string) error {
	return r.withParent(rel, func(pfd int, name, clean string) error {
		err := unix.Unlinkat(pfd, name, 0)
		if err == unix.EISDIR {
			err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		}
		return mapErrno("remove", clean, err)
	})
}

// RenameOptions controls Rename.
type RenameOptions struct {
	// Replace lets the rename replace an existing destination, with the
	// kernel's rules (a directory only by an empty directory, never a
	// directory by a file).
	Replace bool
}

// Rename moves from to to, both within the root.
func (r *Root) Rename(from, to string, opts RenameOptions) error {
	return r.withParent(from, func(fpd int, fname, fclean string) error {
		return r.withParentHeld(to, func(tpd int, tname, tclean string) error {
			var err error
			if opts.Replace {
				err = unix.Renameat(fpd, fname, tpd, tname)
			} else {
				err = renameNoReplace(fpd, fname, tpd, tname)
			}
			if err == unix.EXDEV {
				return newError(CodeInvalidArgument, tclean, "rename across filesystems", err)
			}
			return mapErrno("rename "+fclean+" to", tclean, err)
		})
	})
}

// withParentHeld is withParent for callers that already hold the root.
func (r *Root) withParentHeld(rel string, fn func(pfd int, name, clean string) error) error {
	clean, err := Clean(rel)
	if err != nil {
		return err
	}
	if clean == "." {
		return newError(CodeInvalidArgument, rel, "operation needs a path below the root", nil)
	}
	dir, name := split(clean)
	pfd, err := r.openBeneath(r.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return withPath(err, clean)
	}
	defer unix.Close(pfd)
	return fn(pfd, name, clean)
}

// renameNoReplace is renameat2(RENAME_NOREPLACE), with link+unlink for
// filesystems that do not offer the flag: link(2) is just as atomic about
// refusing an existing name.
func renameNoReplace(fpd int, fname string, tpd int, tname string) error {
	err := unix.Renameat2(fpd, fname, tpd, tname, unix.RENAME_NOREPLACE)
	if err != unix.EINVAL && err != unix.ENOSYS {
		return err
	}
	if lerr := unix.Linkat(fpd, fname, tpd, tname, 0); lerr != nil {
		if lerr == unix.EEXIST {
			return lerr
		}
		return err
	}
	return unix.Unlinkat(fpd, fname, 0)
}

// Chmod sets the mode of a file or directory through its descriptor. A
// symlink is refused: Linux links have no mode of their own, and chmod by
// name would change the target.
func (r *Root) Chmod(rel string, mode fs.FileMode) error {
	return r.withFD(rel, unix.O_PATH, func(fd int, clean string) error {
		return mapErrno("chmod", clean, chmodFD(fd, unixPerm(mode)))
	})
}

// chmodFD changes the mode of the inode behind an O_PATH descriptor.
func chmodFD(fd int, m uint32) error {
	err := unix.Fchmodat(fd, "", m, unix.AT_EMPTY_PATH) // fchmodat2, Linux 6.6+
	if err != unix.EOPNOTSUPP && err != unix.ENOSYS && err != unix.EINVAL {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		// "." below a directory descriptor is that directory, whatever
		// happens to the names around it; looking it up needs search
		// permission, which a mode-0 directory lacks, hence /proc next.
		if err := unix.Fchmodat(fd, ".", m, 0); err != unix.EACCES {
			return err
		}
	}
	// The /proc magic link names exactly this inode.
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), m, 0)
}

// Chtimes sets access and modification times; a zero time is left
// unchanged. On a symlink it sets the link's own times, never the target's.
func (r *Root) Chtimes(rel string, atime, mtime time.Time) error {
	ts := []unix.Timespec{timespec(atime), timespec(mtime)}
	if c, err := Clean(rel); err == nil && c == "." {
		return r.withFD(".", unix.O_PATH|unix.O_DIRECTORY, func(fd int, clean string) error {
			return mapErrno("chtimes", clean, unix.UtimesNanoAt(fd, ".", ts, unix.AT_SYMLINK_NOFOLLOW))
		})
	}
	return r.withParent(rel, func(pfd int, name, clean string) error {
		return mapErrno("chtimes", clean, unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW))
	})
}

func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(t.UnixNano())
}
