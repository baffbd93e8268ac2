package hostpull

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Actions of a planned path.
const (
	// ActApply: the host still holds the base; the workspace's version is written.
	ActApply = "apply"
	// ActSame: the host already holds the workspace's version.
	ActSame = "same"
	// ActConflict: the host and the workspace both changed the path, differently.
	ActConflict = "conflict"
)

// Item is one changed path with what the host holds and what the pull does with it.
type Item struct {
	api.PathChange
	Host   api.PathState `json:"host"`
	Action string        `json:"action"`
	Reason string        `json:"reason,omitempty"`
	// Stuck: a conflict --theirs cannot take either, because the host holds files in a
	// directory the workspace's version would replace; it stays the host's.
	Stuck bool `json:"stuck,omitempty"`
}

// Plan is a pull's decisions, in tree order.
type Plan struct {
	Items     []Item `json:"items"`
	Apply     int    `json:"apply"`
	Same      int    `json:"same"`
	Conflicts int    `json:"conflicts"`
}

// Refused is a plan that cannot be applied at all: a host parent that is a file or a symlink,
// or is missing where the workspace writes. Nothing is written.
type Refused struct {
	Paths []string
}

func (r *Refused) Error() string {
	return fmt.Sprintf("the host tree changed under the pull: %s; nothing was written", strings.Join(r.Paths, "; "))
}

// ErrorCode makes a refusal a conflict for the CLI.
func (r *Refused) ErrorCode() string { return string(protocol.CodeConflict) }

// hostView reads the host through the guard, remembering what it saw of each ancestor.
type hostView struct {
	root *fsguard.Root
	dirs map[string]string // ancestor → "dir" | "file" | "symlink" | "missing" | other type
}

// MakePlan decides every change against the host directory root. It reads only the changed
// paths and their ancestors.
func MakePlan(root *fsguard.Root, changes []api.PathChange) (*Plan, error) {
	v := &hostView{root: root, dirs: map[string]string{}}
	p := &Plan{Items: make([]Item, 0, len(changes))}
	created := map[string]bool{} // directories the plan makes
	held := map[string]bool{}    // directories of the workspace's that are in conflict
	removed := map[string]bool{} // paths the plan removes
	var refused []string
	for _, c := range changes {
		if err := checkName(c.Path); err != nil {
			return nil, err
		}
		it := Item{PathChange: c}
		if a := heldAncestor(c.Path, held); a != "" {
			// Its directory is not the workspace's on the host: neither is it.
			it.Action, it.Reason = ActConflict, "its directory "+a+" is in conflict"
			if c.Workspace.Type == snapshot.TypeDir {
				held[c.Path] = true
			}
			p.Items = append(p.Items, it)
			continue
		}
		bad, missing, made, err := v.parents(c.Path, created)
		if err != nil {
			return nil, err
		}
		switch {
		case made:
			// Its directory is the plan's to make: the host holds nothing there yet.
		case bad != "":
			refused = append(refused, bad)
			continue
		case missing != "":
			// Nothing can be there: fine when the workspace removed it too.
			if c.Workspace.Type != "" {
				refused = append(refused, fmt.Sprintf("host parent %s of %s is missing", missing, c.Path))
				continue
			}
		default:
			if it.Host, err = v.state(c.Path, c); err != nil {
				return nil, err
			}
		}
		switch {
		case it.Host == c.Workspace:
			it.Action = ActSame
		case it.Host == c.Base:
			it.Action = ActApply
		default:
			it.Action, it.Reason = ActConflict, conflictReason(it)
		}
		if it.Action == ActApply && c.Workspace.Type == snapshot.TypeDir && it.Host.Type != snapshot.TypeDir {
			created[c.Path] = true
		}
		if it.Action == ActConflict && c.Workspace.Type == snapshot.TypeDir && it.Host.Type != snapshot.TypeDir {
			held[c.Path] = true
		}
		if it.Action == ActApply && c.Base.Type != "" && c.Workspace.Type != c.Base.Type {
			removed[c.Path] = true
		}

		p.Items = append(p.Items, it)
	}
	if len(refused) > 0 {
		return nil, &Refused{Paths: refused}
	}
	// A directory the workspace removed (or made something else) goes only if the host holds
	// nothing else in it: deepest first, so a subdirectory kept keeps its parents.
	for i := len(p.Items) - 1; i >= 0; i-- {
		it := &p.Items[i]
		if it.Host.Type != snapshot.TypeDir || it.Workspace.Type == snapshot.TypeDir {
			continue
		}
		if it.Action != ActApply && it.Action != ActConflict {
			continue
		}
		extra, err := v.extraChildren(it.Path, removed)
		if err != nil {
			return nil, err
		}
		if extra == "" {
			continue
		}
		if it.Action == ActApply {
			it.Action, it.Reason = ActConflict, "the host holds "+extra+" in the directory the workspace removed"
		}
		it.Stuck = true
		delete(removed, it.Path)
	}
	for _, it := range p.Items {
		switch it.Action {
		case ActApply:
			p.Apply++
		case ActSame:
			p.Same++
		case ActConflict:
			p.Conflicts++
		}
	}
	return p, nil
}

// heldAncestor names an ancestor of p in held.
func heldAncestor(p string, held map[string]bool) string {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if held[d] {
			return d
		}
	}
	return ""
}

func conflictReason(it Item) string {
	switch {
	case it.Host.Type != it.Base.Type && it.Host.Type != it.Workspace.Type:
		return fmt.Sprintf("the host has %s, the workspace %s, the base %s", kind(it.Host), kind(it.Workspace), kind(it.Base))
	case it.Workspace.Type == "":
		return "the host changed what the workspace removed"
	default:
		return "both changed it"
	}
}

func kind(s api.PathState) string {
	if s.Type == "" {
		return "nothing"
	}
	return "a " + s.Type
}

// parents checks every ancestor of p: bad describes one that is a file, a symlink or anything
// but a directory; missing names the first that does not exist; made says the plan makes one
// (so the host holds nothing at p).
func (v *hostView) parents(p string, created map[string]bool) (bad, missing string, made bool, err error) {
	dir := path.Dir(p)
	if dir == "." {
		return "", "", false, nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		a := strings.Join(parts[:i+1], "/")
		if created[a] {
			return "", "", true, nil
		}
		t, ok := v.dirs[a]
		if !ok {
			fi, err := v.root.Lstat(a)
			switch {
			case err == nil:
				t = typeOf(fi)
			case errors.Is(err, fs.ErrNotExist):
				t = "missing"
			default:
				return "", "", false, fmt.Errorf("look at host %s: %w", a, err)
			}
			v.dirs[a] = t
		}
		switch t {
		case snapshot.TypeDir:
		case "missing":
			return "", a, false, nil
		default:
			return fmt.Sprintf("host parent %s of %s is a %s", a, p, t), "", false, nil
		}
	}
	return "", "", false, nil
}

// state is what the host holds at p, compared the way the plan compares entries: a file is
// hashed as the side it may equal was (a sparse entry's digest skips zero blocks).
func (v *hostView) state(p string, c api.PathChange) (api.PathState, error) {
	return v.stateHashing(p, func(size int64) bool {
		return c.Base.Sparse && c.Base.Size == size || c.Workspace.Sparse && c.Workspace.Size == size
	})
}

// stateAs is what the host holds at p, hashed as want is.
func (v *hostView) stateAs(p string, want api.PathState) (api.PathState, error) {
	return v.stateHashing(p, func(size int64) bool { return want.Sparse && want.Size == size })
}

func (v *hostView) stateHashing(p string, sparseAt func(size int64) bool) (api.PathState, error) {
	fi, err := v.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return api.PathState{}, nil
	}
	if err != nil {
		return api.PathState{}, fmt.Errorf("look at host %s: %w", p, err)
	}
	s := api.PathState{Type: typeOf(fi), Mode: uint32(fi.Mode().Perm())}
	switch s.Type {
	case snapshot.TypeFile:
		s.Size = fi.Size()
		// Hashed the way the side it is compared with was: a sparse entry's digest skips
		// zero blocks.
		sparse := sparseAt(s.Size)
		if s.SHA256, err = v.digest(p, s.Size, sparse); err != nil {
			return s, err
		}
		s.Sparse = sparse
	case snapshot.TypeSymlink:
		s.Mode = 0
		if s.LinkTarget, err = v.root.Readlink(p); err != nil {
			return s, fmt.Errorf("read host link %s: %w", p, err)
		}
	case snapshot.TypeDir:
	default:
		s.Mode = 0
	}
	return s, nil
}

func (v *hostView) digest(p string, size int64, sparse bool) (string, error) {
	f, err := v.root.Open(p)
	if err != nil {
		return "", fmt.Errorf("read host %s: %w", p, err)
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	if sparse {
		h = snapshot.ContentHash(snapshot.Entry{Sparse: true, Size: size})
	}
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read host %s: %w", p, err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// extraChildren names a child of host directory dir that the plan does not remove.
func (v *hostView) extraChildren(dir string, removed map[string]bool) (string, error) {
	ents, err := v.root.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("list host %s: %w", dir, err)
	}
	var extra []string
	for _, e := range ents {
		if p := dir + "/" + e.Name(); !removed[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	if len(extra) == 0 {
		return "", nil
	}
	return extra[0], nil
}

func typeOf(fi fs.FileInfo) string {
	switch {
	case fi.Mode().IsRegular():
		return snapshot.TypeFile
	case fi.IsDir():
		return snapshot.TypeDir
	case fi.Mode()&fs.ModeSymlink != 0:
		return snapshot.TypeSymlink
	}
	return "special file"
}

// checkName refuses a path from the controller that is not canonical, relative, outside .git
// and free of the guard's reserved names: the host guard would refuse most of these anyway, but
// a plan naming one is not a plan to act on.
func checkName(p string) error {
	bad := p == "" || p == "." || strings.HasPrefix(p, "/") || path.Clean(p) != p
	for _, c := range strings.Split(p, "/") {
		bad = bad || c == ".." || strings.HasPrefix(c, fsguard.TempPrefix) || strings.EqualFold(c, ".git")
	}
	if bad {
		return protocol.Errorf(protocol.CodeCorrupt, "the pull's plan names %q: not a path a pull writes", p)
	}
	return nil
}
