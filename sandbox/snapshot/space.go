package snapshot

import (
	"fmt"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// space is what a restore may still write: files are counted by their length (their apparent
// size), sparse or not, against a configured limit and the free space of the target's
// filesystem as it was when the restore began. Counting lengths rather than blocks is
// conservative: a sparse file restores into fewer blocks, but a restore never starts what the
// disk could not hold were the archive's holes written.
type space struct {
	limit int64 // 0: none
	free  int64
	used  int64
}

func newSpace(root *fsguard.Root, limit int64) (*space, error) {
	var st unix.Statfs_t
	err := root.WithFD(func(fd int) error { return unix.Fstatfs(fd, &st) })
	if err != nil {
		return nil, fmt.Errorf("statfs: %w", err)
	}
	return &space{limit: limit, free: int64(st.Bavail) * st.Bsize}, nil
}

// take counts n more bytes, or refuses them (too_large, no_space) before they are written.
func (s *space) take(p string, n int64) error {
	if s.limit > 0 && s.used+n > s.limit {
		return newError(CodeTooLarge, p, fmt.Sprintf("restore needs more than %d bytes (the files' length), over the limit of %d", s.used+n, s.limit), nil)
	}
	if s.used+n > s.free {
		return newError(CodeNoSpace, p, fmt.Sprintf("restore needs more than %d bytes (the files' length); the target's filesystem has %d free", s.used+n, s.free), nil)
	}
	s.used += n
	return nil
}
