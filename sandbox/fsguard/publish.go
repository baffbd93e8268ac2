package fsguard

import (
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
