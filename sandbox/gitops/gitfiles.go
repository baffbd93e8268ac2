package gitops

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/tetherhq/tether/protocol"
)

// gitFiles is where the runner itself writes Git's files (locks, refs, the index, reflogs) and
// reads info/exclude: the repository's pinned .git, so a symlink or fifo planted in .git
// (refs/heads -> /elsewhere, logs/HEAD -> a file outside) is refused instead of followed.
type gitFiles struct {
	fs   billy.Filesystem
	root string // the directory fs's names are relative to
}

func (r *repo) gitFiles() gitFiles { return gitFiles{fs: r.dot, root: r.gitDir} }

// name maps an absolute path under the repository to fs's name for it.
func (g gitFiles) name(abs string) (string, error) {
	rel, err := filepath.Rel(g.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", protocol.Errorf(protocol.CodePathEscape, "%s is outside %s", abs, g.root)
	}
	return filepath.ToSlash(rel), nil
}

func (g gitFiles) mkdirAll(abs string) error {
	n, err := g.name(abs)
	if err != nil {
		return err
	}
	return g.fs.MkdirAll(n, 0o755)
}

func (g gitFiles) openFile(abs string, flag int, perm os.FileMode) (billy.File, error) {
	n, err := g.name(abs)
	if err != nil {
		return nil, err
	}
	return g.fs.OpenFile(n, flag, perm)
}

func (g gitFiles) rename(from, to string) error {
	f, err := g.name(from)
	if err != nil {
		return err
	}
	t, err := g.name(to)
	if err != nil {
		return err
	}
	return g.fs.Rename(f, t)
}

func (g gitFiles) remove(abs string) error {
	n, err := g.name(abs)
	if err != nil {
		return err
	}
	return g.fs.Remove(n)
}
