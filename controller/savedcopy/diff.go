package savedcopy

import (
	"context"
	"io"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// GitDir is the repository directory a pull never treats as files: what is under it is Git's
// own state, which reaches a host as a pack that host Git checks, not as bytes written into
// the host's repository.
const GitDir = ".git"

// underGit says p is .git or inside it.
func underGit(p string) bool {
	return p == GitDir || strings.HasPrefix(p, GitDir+"/")
}

// Diff lists the paths whose entry differs between base and now, read from their resolved
// manifests side by side (both are in tree order, so it holds one entry of each at a time),
// leaving out .git. An entry differs in type, permission bits, content (size, digest, sparse)
// or link target; modification times do not count: a rewrite of the same bytes is no change.
func (a Archives) Diff(ctx context.Context, base, now api.Snapshot) ([]api.PathChange, error) {
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
		for {
			e, err := rr.Next()
			if err == io.EOF {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			if !underGit(e.Path) {
				return &e.Entry, nil
			}
		}
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
			changes = append(changes, api.PathChange{Path: b.Path, Base: State(b)})
			if b, err = next(br); err != nil {
				return nil, err
			}
		case c > 0: // only now: the workspace added it
			changes = append(changes, api.PathChange{Path: n.Path, Workspace: State(n)})
			if n, err = next(nr); err != nil {
				return nil, err
			}
		default:
			if bs, ns := State(b), State(n); bs != ns {
				changes = append(changes, api.PathChange{Path: n.Path, Base: bs, Workspace: ns})
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
