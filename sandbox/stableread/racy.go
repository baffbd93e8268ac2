package stableread

import (
	"time"

	"golang.org/x/sys/unix"
)

// Racy reports whether a stamp taken at readAt (the clock read just before the stat) cannot by
// itself prove that the entry stays unchanged afterwards: its last change is within a coarse
// timestamp tick of the read, so a later change in that same tick may leave every time equal.
// A caller that must know the entry is unchanged later compares its content then, as Git does
// for "racily clean" index entries. A ctime in the future counts as racy.
func Racy(st Stamp, readAt time.Time) bool {
	return readAt.Sub(time.Unix(st.Ctime.Unix())) <= coarseTick
}

// Racy is Racy for the stamp Begin took: whether a later stat equal to it still leaves the
// content in doubt.
func (r *Read) Racy() bool { return Racy(r.before, r.start) }

// FromStat is the stamp of a stat record, as the guard's Lstat returns it.
func FromStat(st *unix.Stat_t) Stamp { return stampOf(st) }
