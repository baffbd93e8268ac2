package runner

import (
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

// resolveDir resolves a workspace-relative directory through the guard and returns a path the
// child can chdir to. The path names the guard's open descriptor (/proc/self/fd/N, inherited at
// fork), so a symlink swapped in after the check cannot redirect the command.
func (r *Runner) resolveDir(rel string) (string, func(), error) {
	if rel == "" {
		rel = "."
	}
	root, err := fsguard.Open(r.root, fsguard.WithHolds(r.holds))
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	d, err := root.OpenDir(rel)
	if err != nil {
		return "", nil, err
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		// No procfs in this sandbox: fall back to the checked path.
		d.Close()
		return filepath.Join(r.root, filepath.FromSlash(rel)), func() {}, nil
	}
	p, err := d.ProcPath()
	if err != nil {
		d.Close()
		return "", nil, err
	}
	return p, func() { d.Close() }, nil
}
