package savedcopy

import (
	"context"
	"io"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// GitDir is the repository directory a pull never treats as files: what is under it is Git's
// own state (config, hooks, a gitdir pointer), which host Git would obey. A repository's history
// reaches a host as a pack that host Git checks, never as bytes written into a .git.
const GitDir = ".git"

// NotPulled says why a pull leaves path p out, or "" when it may carry it: a .git at any depth
// and in any letter case (a nested repository or a submodule's pointer is as much Git's state
// as the top one), and the guard's reserved temporary names (a host guard refuses to write
// them; an agent making one must not block the rest of its work).
func NotPulled(p string) string {
	for _, c := range strings.Split(p, "/") {
		switch {
		case strings.EqualFold(c, GitDir):
			return "Git's own state (a .git) never travels as files"
		case strings.HasPrefix(c, fsguard.TempPrefix):
			return "a name reserved for Tether's temporary files"
		}
	}
	return ""
}

// underGit says p is a path a pull never carries.
func underGit(p string) bool { return NotPulled(p) != "" }

// maxSkipped bounds the paths Diff names as skipped (it counts them all).
const maxSkipped = 100

// Diff lists the paths whose entry differs between base and now, read from their resolved
// manifests side by side (both are in tree order, so it holds one entry of each at a time).
// An entry differs in type, permission bits, content (size, digest, sparse) or link target;
// modification times do not count: a rewrite of the same bytes is no change. Paths a pull never
// carries (NotPulled) are left out, and counted and named (up to maxSkipped) in Skipped unless
// they are the top .git's own, whose commits travel as a pack.
func (a Archives) Diff(ctx context.Context, base, now api.Snapshot) ([]api.PathChange, api.Skipped, error) {
	var skipped api.Skipped
	changes, err := a.diff(ctx, base, now, func(p string) {
		if p == GitDir || strings.HasPrefix(p, GitDir+"/") {
			return
		}
		skipped.Count++
		if len(skipped.Paths) < maxSkipped {
			skipped.Paths = append(skipped.Paths, p)
		}
	})
	return changes, skipped, err
}

func (a Archives) diff(ctx context.Context, base, now api.Snapshot, skip func(string)) ([]api.PathChange, error) {
	br, err := a.OpenResolved(ctx, base)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	nr, err := a.OpenResolved(ctx, now)
	if err != nil {
		return nil, err
	}
	defer nr.Close()
	next := func(rr *ResolvedReader) (*snapshot.Entry, error) {
		e, err := rr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &e.Entry, nil
	}
	b, err := next(br)
	if err != nil {
		return nil, err
	}
	n, err := next(nr)
	if err != nil {
		return nil, err
	}
	changes := []api.PathChange{}
	add := func(c api.PathChange) {
		if underGit(c.Path) {
			skip(c.Path)
			return
		}
		changes = append(changes, c)
	}
	for b != nil || n != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := 0
		switch {
		case b == nil:
			c = 1
		case n == nil:
			c = -1
		default:
			c = snapshot.CompareTree(b.Path, n.Path)
		}
		switch {
		case c < 0: // only in base: the workspace removed it
			add(api.PathChange{Path: b.Path, Base: State(b)})
			if b, err = next(br); err != nil {
				return nil, err
			}
		case c > 0: // only now: the workspace added it
			add(api.PathChange{Path: n.Path, Workspace: State(n)})
			if n, err = next(nr); err != nil {
				return nil, err
			}
		default:
			if bs, ns := State(b), State(n); bs != ns {
				add(api.PathChange{Path: n.Path, Base: bs, Workspace: ns})
			}
			if b, err = next(br); err != nil {
				return nil, err
			}
			if n, err = next(nr); err != nil {
				return nil, err
			}
		}
	}
	return changes, nil
}

// State is what a pull compares of an entry.
func State(e *snapshot.Entry) api.PathState {
	s := api.PathState{Type: e.Type, Mode: e.Mode & 0o777}
	switch e.Type {
	case snapshot.TypeFile:
		s.Size, s.SHA256, s.Sparse = e.Size, e.SHA256, e.Sparse
	case snapshot.TypeSymlink:
		s.LinkTarget, s.Mode = e.LinkTarget, 0
	}
	return s
}

// checkPath refuses a requested path that is not canonical and relative.
func checkPath(p string) error {
	if p == "" || p == "." || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return protocol.Errorf(protocol.CodeInvalidArgument, "%q is not a canonical relative path", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%q is not a canonical relative path", p)
		}
	}
	return nil
}
