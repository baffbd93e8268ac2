package fsguard

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Holds is the set of temporary files and staging directories one process created in a tree and
// still holds: a write or a restore in flight. A snapshot of the tree skips exactly these and
// archives everything else, whatever its name: a file an agent named like a temporary one is the
// agent's work. Entries are known by inode, so nothing in the tree can claim to be one by name.
type Holds struct {
	mu   sync.Mutex
	idle *sync.Cond // signalled when no creation is in progress
	// creating counts creations between the system call and their registration: a query waits
	// for them, so a capture that lists a brand-new temporary file never takes it for the agent's.
	creating int
	ids      map[holdID]int
}

type holdID struct{ dev, ino uint64 }

// NewHolds makes an empty set; pass it to Open with WithHolds.
func NewHolds() *Holds {
	h := &Holds{ids: map[holdID]int{}}
	h.idle = sync.NewCond(&h.mu)
	return h
}

// WithHolds records the temporary files and staging directories made through the root (and the
// roots opened from it) in h.
func WithHolds(h *Holds) Option {
	return func(r *Root) { r.holds = h }
}

// Held reports whether st describes one of the root's holds. Without Holds, nothing is held.
func (r *Root) Held(st *unix.Stat_t) bool {
	h := r.holds
	if h == nil || st == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.creating > 0 {
		h.idle.Wait()
	}
	return h.ids[holdID{uint64(st.Dev), st.Ino}] > 0
}

// create runs mk, which makes an entry and returns its stat, and holds that entry until the
// returned release runs. A nil Holds only runs mk.
func (h *Holds) create(mk func() (*unix.Stat_t, error)) (release func(), err error) {
	if h == nil {
		_, err := mk()
		return func() {}, err
	}
	h.mu.Lock()
	h.creating++
	h.mu.Unlock()
	st, err := mk()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.creating--
	if h.creating == 0 {
		h.idle.Broadcast()
	}
	if err != nil || st == nil {
		return func() {}, err
	}
	id := holdID{uint64(st.Dev), st.Ino}
	h.ids[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.ids[id]--; h.ids[id] <= 0 {
				delete(h.ids, id)
			}
		})
	}, nil
}

// createHeldTemp is createTemp with the new file held until release.
func (h *Holds) createHeldTemp(pfd int, clean string) (tmp string, f *os.File, release func(), err error) {
	release, err = h.create(func() (*unix.Stat_t, error) {
		var cerr error
		if tmp, f, cerr = createTemp(pfd, clean); cerr != nil {
			return nil, cerr
		}
		var st unix.Stat_t
		if serr := unix.Fstat(int(f.Fd()), &st); serr != nil {
			// Unheld, the file would be archived if a capture saw it: better no write at all.
			f.Close()
			unix.Unlinkat(pfd, tmp, 0)
			return nil, mapErrno("stat temporary file for", clean, serr)
		}
		return &st, nil
	})
	return tmp, f, release, err
}

// MkdirHeld creates the directory name (a single name in r) and holds it until release: a
// staging directory, which a snapshot must not take for the agent's.
func (r *Root) MkdirHeld(name string, mode os.FileMode) (release func(), err error) {
	return r.holds.create(func() (*unix.Stat_t, error) {
		if err := r.Mkdir(name, mode); err != nil {
			return nil, err
		}
		fi, err := r.Lstat(name)
		if err != nil {
			_ = r.Remove(name)
			return nil, err
		}
		st, _ := fi.Sys().(*unix.Stat_t)
		return st, nil
	})
}
