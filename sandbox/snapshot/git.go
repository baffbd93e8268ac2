package snapshot

import (
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/gitstate"
)

// planGit reads the root repository's state for the manifest. The .git
// entry itself is archived by the walk as whatever it is, like any other
// name: a .git directory as its files, a .git file ("gitdir: PATH") as a
// regular file. A repository gitstate does not read (a .git file, a
// commondir or objects/info/alternates, which may name directories outside
// the workspace and are never followed; or a layout go-git cannot read)
// leaves Git out of the manifest with the reason in GitError; the capture
// still succeeds and loses nothing.
//
// It returns the state, or why there is none ("" and nil: no repository).
func planGit(root *fsguard.Root) (*gitstate.State, string) {
	repo, err := gitstate.Open(root, ".")
	if err != nil {
		return nil, err.Error()
	}
	if repo == nil {
		return nil, ""
	}
	st, err := repo.State()
	if err != nil {
		return nil, err.Error()
	}
	return st, ""
}
