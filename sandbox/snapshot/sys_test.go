package snapshot

import (
	"time"

	"golang.org/x/sys/unix"
)

func lchtimes(p string, mt time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
