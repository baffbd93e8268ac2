package fsguard

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Resolver selects how paths are resolved beneath the root.
type Resolver int

const (
	// ResolverAuto uses openat2 and falls back to the walk when the kernel
	// (or a seccomp filter) does not offer it.
	ResolverAuto Resolver = iota
	// ResolverOpenat2 requires openat2; Open fails without it.
	ResolverOpenat2
	// ResolverWalk always opens one component at a time with O_NOFOLLOW.
	ResolverWalk
)

func (r Resolver) String() string {
	switch r {
	case ResolverAuto:
		return "auto"
	case ResolverOpenat2:
		return "openat2"
	case ResolverWalk:
		return "walk"
	}
	return fmt.Sprintf("Resolver(%d)", int(r))
}

// Option configures Open.
type Option func(*Root)

// WithResolver chooses the resolver; tests use it to exercise both.
func WithResolver(res Resolver) Option {
	return func(r *Root) { r.want = res }
}

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Root is an open workspace tree. It is safe for concurrent use; Close
// waits for operations in flight so that a descriptor number is never
// reused under a running operation.
type Root struct {
	mu   sync.RWMutex
	fd   int // O_PATH|O_DIRECTORY; -1 once closed
	name string
	want Resolver
	// walk is set when openat2 is unavailable or the walk was asked for.
	walk atomic.Bool
	// holds, when set, records the temporary files and staging directories made through it.
	holds *Holds
	// bufs lends copy buffers (bufpool.go); shared with the roots opened beneath this one.
	bufs *bufPool
}

var errClosed = errors.New("fsguard: root is closed")

// Open opens the directory dir, which must be an absolute path. dir itself
// is trusted configuration and may be reached through symlinks; nothing
// beneath it is.
func Open(dir string, opts ...Option) (*Root, error) {
	if !filepath.IsAbs(dir) {
		return nil, newError(CodeInvalidArgument, dir, "root must be an absolute path", nil)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, mapErrno("open root", dir, err)
	}
	r := &Root{fd: fd, name: dir, bufs: newBufPool()}
	for _, o := range opts {
		o(r)
	}
	if err := r.pickResolver(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return r, nil
}

func (r *Root) pickResolver() error {
	switch r.want {
	case ResolverWalk:
		r.walk.Store(true)
		return nil
	case ResolverAuto, ResolverOpenat2:
	default:
		return newError(CodeInvalidArgument, "", "unknown resolver "+r.want.String(), nil)
	}
	fd, err := unix.Openat2(r.fd, ".", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: resolveFlags,
	})
	if err == nil {
		unix.Close(fd)
		return nil
	}
	// Docker-style seccomp profiles answer unknown syscalls with EPERM
	// rather than ENOSYS; opening "." can fail with neither for real.
	if (err == unix.ENOSYS || err == unix.EPERM) && r.want == ResolverAuto {
		r.walk.Store(true)
		return nil
	}
	return fmt.Errorf("fsguard: openat2 unavailable: %w", err)
}

// subRoot wraps a descriptor already resolved beneath r.
func (r *Root) subRoot(fd int, name string) *Root {
	s := &Root{fd: fd, name: name, want: r.want, holds: r.holds, bufs: r.bufs}
	s.walk.Store(r.walk.Load())
	return s
}

// Resolver reports the resolver in use: ResolverOpenat2 or ResolverWalk.
func (r *Root) Resolver() Resolver {
	if r.walk.Load() {
		return ResolverWalk
	}
	return ResolverOpenat2
}

// Name returns the host path the root was opened with, for messages only:
// nothing in this package opens it by name again.
func (r *Root) Name() string { return r.name }

// Close releases the root's descriptor. Further operations fail.
func (r *Root) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// acquire pins the root descriptor for one operation; release must follow.
// Operations never acquire twice: a pending Close would deadlock them.
func (r *Root) acquire() (int, error) {
	r.mu.RLock()
	if r.fd < 0 {
		r.mu.RUnlock()
		return -1, errClosed
	}
	return r.fd, nil
}

func (r *Root) release() { r.mu.RUnlock() }
