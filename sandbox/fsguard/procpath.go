package fsguard

import "fmt"

// ProcPath names the root's open descriptor through procfs. A child process can chdir to it
// across fork (descriptors are inherited until exec), landing exactly in the directory the guard
// resolved even if the path is swapped for a symlink afterwards. Valid until Close.
func (r *Root) ProcPath() (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.fd < 0 {
		return "", errClosed
	}
	return fmt.Sprintf("/proc/self/fd/%d", r.fd), nil
}

// WithFD calls fn with the root's O_PATH directory descriptor, for *at system calls the guard
// does not wrap. The descriptor is valid only during fn (the root cannot be closed meanwhile) and
// must not be closed or kept.
func (r *Root) WithFD(fn func(fd int) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.fd < 0 {
		return errClosed
	}
	return fn(r.fd)
}
