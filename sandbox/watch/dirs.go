package watch

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// watchDir opens dir through the guard and watches the very directory the guard resolved,
// through its descriptor. The returned root (the caller closes it) lists that same directory,
// so what the listing finds and what the watch reports are of one inode.
func (w *Watcher) watchDir(dir string) (*fsguard.Root, int32, error) {
	if len(w.dirs) >= w.opts.MaxWatches {
		return nil, 0, errLimit
	}
	sub, err := w.root.OpenDir(dir)
	if err != nil {
		return nil, 0, err
	}
	proc, err := sub.ProcPath()
	if err != nil {
		sub.Close()
		return nil, 0, err
	}
	var wd int
	var werr error
	if err := w.rc.Control(func(fd uintptr) { wd, werr = unix.InotifyAddWatch(int(fd), proc, mask) }); err != nil {
		werr = err
	}
	if werr != nil {
		sub.Close()
		if errors.Is(werr, unix.ENOSPC) {
			return nil, 0, errLimit // the system's bound on watches (fs.inotify.max_user_watches)
		}
		return nil, 0, fmt.Errorf("watch %s: %w", dir, werr)
	}
	w.track(int32(wd), dir)
	return sub, int32(wd), nil
}

// list names the entries of sub (the directory dir), reporting each as created when announce is
// set, and returns its subdirectories. Tether's own temporaries are left out.
func (w *Watcher) list(sub *fsguard.Root, dir string, announce bool) []string {
	entries, err := sub.ReadDir(".")
	if err != nil {
		return nil // removed meanwhile: its parent's watch says so
	}
	var subdirs []string
	for _, e := range entries {
		if Reserved(e.Name()) {
			continue
		}
		p := path.Join(dir, e.Name())
		if announce {
			w.push(protocol.WatchEvent{Type: protocol.WatchCreate, Path: p, IsDir: e.IsDir()})
		}
		if e.IsDir() {
			subdirs = append(subdirs, p)
		}
	}
	return subdirs
}

// walk watches the directories queued and everything beneath them. With announce (directories
// that appeared while watched), what each holds is reported as created: it may have been made
// before its directory's watch was in place, the classic race. An entry made after the watch
// and before the listing is then reported twice, never missed.
func (w *Watcher) walk(queue []string, announce bool) {
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		sub, _, err := w.watchDir(dir)
		if errors.Is(err, errLimit) {
			if !w.limitHit {
				w.limitHit = true
				w.overflow(dir, fmt.Sprintf("more than %d directories to watch: %s and others are not watched", w.opts.MaxWatches, dir))
			}
			return
		}
		if err != nil {
			continue // gone or replaced (by a symlink, say) meanwhile: its parent's watch says so
		}
		queue = append(queue, w.list(sub, dir, announce)...)
		sub.Close()
	}
}

func (w *Watcher) track(wd int32, dir string) {
	if old, ok := w.dirs[wd]; ok && w.byDir[old] == wd {
		delete(w.byDir, old) // the same directory under a name it no longer has
	}
	w.dirs[wd] = dir
	w.byDir[dir] = wd
}

func (w *Watcher) untrack(wd int32) {
	if dir, ok := w.dirs[wd]; ok {
		if w.byDir[dir] == wd {
			delete(w.byDir, dir)
		}
		delete(w.dirs, wd)
	}
}

// under reports whether p is dir or beneath it.
func under(p, dir string) bool {
	return p == dir || dir == "." || strings.HasPrefix(p, dir+"/")
}

// renameDirs renames the watched directories at and beneath from: their watches follow the
// inodes, only their names change.
func (w *Watcher) renameDirs(from, to string) {
	for wd, dir := range w.dirs {
		if under(dir, from) {
			w.track(wd, to+dir[len(from):])
		}
	}
}

// unwatchUnder drops the watches of a directory that left the watched tree, and of those
// beneath it: their events could no longer be named.
func (w *Watcher) unwatchUnder(dir string) {
	for wd, d := range w.dirs {
		if wd != w.topWD && under(d, dir) {
			_ = w.rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
			w.untrack(wd)
		}
	}
}
