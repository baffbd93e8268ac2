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
