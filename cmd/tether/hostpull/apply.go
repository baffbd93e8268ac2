package hostpull

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Options say how Apply resolves conflicts and where it keeps what it does not apply.
type Options struct {
	// Theirs applies the workspace's version of a conflicting path (one the host holds a
	// directory of files at stays the host's); the host's goes to the recovery directory. Ours
	// (and the default) keeps the host's; the workspace's goes there.
	Theirs bool
	// RecoveryDir receives the version of each conflicting path that is not kept (created on
	// first use, 0700; nothing in it is ever replaced).
	RecoveryDir string
	// Files streams the workspace's bytes of the named files as a tar, in tree order.
	Files func(ctx context.Context, paths []string) (io.ReadCloser, error)
}

// Result is what Apply did.
type Result struct {
	Applied   int `json:"applied"`
	Conflicts int `json:"conflicts"`
	// Late counts paths the host changed after the plan looked: left as the host has them and
	// counted as conflicts too.
	Late      int      `json:"late,omitempty"`
	LatePaths []string `json:"late_paths,omitempty"`
	Recovered int      `json:"recovered"`
	Recovery  string   `json:"recovery_dir,omitempty"`
}

// errLate is a host path that changed after the plan looked at it.
var errLate = errors.New("the host changed it during the pull")

// Apply carries out plan on the host directory root. The workspace's bytes are fetched first,
// whole and checked, into a staging directory inside root and synced; only then is the tree
// touched, so a transfer that fails writes nothing. Each path then changes by one rename, and
// only while the host still holds what the plan saw there (the base): a host edit made since is
// left alone and reported. One syncfs at the end makes the renames durable. On an error the
// Result says what was done before it.
func Apply(ctx context.Context, root *fsguard.Root, plan *Plan, o Options) (Result, error) {
	res := Result{}
	take := func(it *Item) bool {
		return it.Action == ActApply || it.Action == ActConflict && o.Theirs && !it.Stuck
	}
	need := map[string]api.PathState{}
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Workspace.Type == snapshot.TypeFile && (take(it) || it.Action == ActConflict) {
			need[it.Path] = it.Workspace
		}
	}
	stage, staged, err := fetch(ctx, root, need, o.Files)
	if stage != "" {
		defer root.RemoveAll(stage)
	}
	if err != nil {
		return res, err
	}
	rec := &recovery{dir: o.RecoveryDir}
	defer rec.close()
	// Conflicts first: what is not kept is saved before anything changes.
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Action != ActConflict {
			continue
		}
		res.Conflicts++
		var err error
		if take(it) {
			if it.Host.Type == snapshot.TypeFile || it.Host.Type == snapshot.TypeSymlink {
				err = rec.keep(func(r *fsguard.Root) error { return copyOut(ctx, root, it.Path, it.Host, r) })
			}
		} else if it.Workspace.Type == snapshot.TypeFile || it.Workspace.Type == snapshot.TypeSymlink {
			err = rec.keep(func(r *fsguard.Root) error { return keepWorkspaces(ctx, root, stage, staged, it, r) })
		}
		if err != nil {
			return res, fmt.Errorf("keep %s in %s: %w", it.Path, o.RecoveryDir, err)
		}
	}
	res.Recovered, res.Recovery = rec.n, rec.used
	left := map[string]bool{} // paths a late host change kept as the host has them
	late := func(it *Item, err error) (bool, error) {
		if !errors.Is(err, errLate) {
			return false, err
		}
		res.Late++
		res.Conflicts++
		res.LatePaths = append(res.LatePaths, it.Path)
		left[it.Path] = true
		return true, nil
	}
	// Removals, deepest first, each only of what the plan saw there.
	gone := map[string]bool{}
	for i := len(plan.Items) - 1; i >= 0; i-- {
		it := &plan.Items[i]
		if !take(it) || it.Host.Type == "" || it.Host.Type == it.Workspace.Type && !replacedByRemoval(it.Host) {
			continue
		}
		if kept, err := late(it, removeIf(root, it.Path, it.Host)); err != nil {
			return res, applied(res, fmt.Errorf("remove %s: %w", it.Path, err))
		} else if kept {
			continue
		}
		gone[it.Path] = true
		if it.Workspace.Type == "" {
			res.Applied++
		}
	}
	for i := range plan.Items {
		it := &plan.Items[i]
		if !take(it) || it.Workspace.Type == "" || left[it.Path] || !parentsPlaced(it.Path, left) {
			continue
		}
		host := it.Host
		if gone[it.Path] {
			host = api.PathState{}
		}
		if kept, err := late(it, place(root, stage, staged, it, host)); err != nil {
			return res, applied(res, fmt.Errorf("write %s: %w", it.Path, err))
		} else if !kept {
			res.Applied++
		}
	}
	if err := root.Sync(); err != nil {
		return res, applied(res, fmt.Errorf("sync: %w", err))
	}
	return res, nil
}

// replacedByRemoval says a host entry of the workspace's own type is removed before the
// workspace's is placed: a symlink (no rename replaces one only while it points where the plan
// saw) and a sparse file (compared by its content digest, which the rename's check cannot do).
func replacedByRemoval(host api.PathState) bool {
	return host.Type == snapshot.TypeSymlink || host.Type == snapshot.TypeFile && host.Sparse
}

// parentsPlaced says no ancestor of p was left as the host had it by a late change (the
// workspace's version of p would land in the host's).
func parentsPlaced(p string, left map[string]bool) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if left[d] {
			return false
		}
	}
	return true
}

// applied is a failure after the tree began to change: failed (not the code of its cause, which
// could read as "nothing was written"), saying how far it got.
func applied(res Result, err error) error {
	return protocol.Errorf(protocol.CodeFailed, "%v (partly applied: %d paths before it; run the pull again to finish)", err, res.Applied)
}

// removeIf removes p only while it is what the plan saw (want): a directory only if empty; a
// file or a symlink is first renamed aside, looked at, and unlinked only if it still holds
// want's bytes or target, else put back (errLate).
func removeIf(root *fsguard.Root, p string, want api.PathState) error {
	if want.Type == snapshot.TypeDir {
		err := root.Remove(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w (%v)", errLate, err)
		}
		return nil
	}
	aside := tempName(p)
	if err := root.Rename(p, aside, fsguard.RenameOptions{}); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errLate
		}
		return err
	}
	v := &hostView{root: root}
	got, err := v.stateAs(aside, want)
	if err == nil && got == want {
		return root.Remove(aside)
	}
	if rerr := root.Rename(aside, p, fsguard.RenameOptions{}); rerr != nil {
		// Something new took the name meanwhile: both stay, the one set aside under its
		// temporary name, which the error names.
		return fmt.Errorf("%w; it is kept as %s: %v", errLate, aside, rerr)
	}
	if err != nil {
		return err
	}
	return errLate
}

// place makes it.Path the workspace's version; host is what the plan saw there (nothing, when
// it was removed): a file replaces only a file still holding those bytes.
func place(root *fsguard.Root, stage string, staged map[string]string, it *Item, host api.PathState) error {
	w := it.Workspace
	mode := fs.FileMode(w.Mode & 0o777)
	var err error
	switch w.Type {
	case snapshot.TypeDir:
		if host.Type == snapshot.TypeDir {
			return root.Chmod(it.Path, mode)
		}
		if err = root.Mkdir(it.Path, mode); err == nil {
			err = root.Chmod(it.Path, mode) // past the umask
		}
	case snapshot.TypeSymlink:
		tmp := tempName(it.Path)
		if err = root.Symlink(w.LinkTarget, tmp); err != nil {
			return err
		}
		if err = root.Rename(tmp, it.Path, fsguard.RenameOptions{}); err != nil {
			root.Remove(tmp)
		}
	case snapshot.TypeFile:
		from := stage + "/" + staged[it.Path]
		if err = root.Chmod(from, mode); err != nil {
			return err
		}
		var opts fsguard.PublishOptions
		if host.Type == snapshot.TypeFile {
			opts.IfSHA256 = host.SHA256
		}
		err = root.Publish(from, it.Path, opts)
	default:
		return fmt.Errorf("unknown type %q", w.Type)
	}
	if c := fsguard.CodeOf(err); c == string(protocol.CodeConflict) || c == string(protocol.CodeExists) {
		return fmt.Errorf("%w: %v", errLate, err)
	}
	return err
}

// recovery is the directory conflicts' other versions go to, made on first use.
type recovery struct {
	dir, used string
	root      *fsguard.Root
	n         int
}

func (r *recovery) keep(fn func(*fsguard.Root) error) error {
	if r.root == nil {
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			return err
		}
		root, err := fsguard.Open(r.dir)
		if err != nil {
			return err
		}
		r.root, r.used = root, r.dir
	}
	if err := fn(r.root); err != nil {
		return err
	}
	r.n++
	return nil
}

func (r *recovery) close() {
	if r.root != nil {
		r.root.Sync()
		r.root.Close()
	}
}

// copyOut keeps the host's version of p (a file or a symlink) in rec, never replacing anything
// there.
func copyOut(ctx context.Context, root *fsguard.Root, p string, host api.PathState, rec *fsguard.Root) error {
	if err := rec.MkdirAll(path.Dir(p), 0o700); err != nil {
		return err
	}
	if host.Type == snapshot.TypeSymlink {
		return rec.Symlink(host.LinkTarget, p)
	}
	f, err := root.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = rec.WriteFile(ctx, p, f, fs.FileMode(host.Mode&0o777), fsguard.WriteOptions{NoSync: true})
	return err
}

// keepWorkspaces keeps the workspace's version of it (a file from staging, or a symlink) in rec.
func keepWorkspaces(ctx context.Context, root *fsguard.Root, stage string, staged map[string]string, it *Item, rec *fsguard.Root) error {
	if err := rec.MkdirAll(path.Dir(it.Path), 0o700); err != nil {
		return err
	}
	if it.Workspace.Type == snapshot.TypeSymlink {
		return rec.Symlink(it.Workspace.LinkTarget, it.Path)
	}
	f, err := root.Open(stage + "/" + staged[it.Path])
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = rec.WriteFile(ctx, it.Path, f, fs.FileMode(it.Workspace.Mode&0o777), fsguard.WriteOptions{NoSync: true})
	return err
}

// fetch streams the workspace's bytes of the files in need into a new staging directory in
// root, each checked against the plan's size and digest, and syncs them; it returns the
// directory and each path's staged name.
func fetch(ctx context.Context, root *fsguard.Root, need map[string]api.PathState, files func(context.Context, []string) (io.ReadCloser, error)) (string, map[string]string, error) {
	staged := make(map[string]string, len(need))
	if len(need) == 0 {
		return "", staged, nil
	}
	stage := tempName("pull")
	if err := root.Mkdir(stage, 0o700); err != nil {
		return "", nil, fmt.Errorf("staging directory: %w", err)
	}
	want := make(map[string]bool, len(need))
	paths := make([]string, 0, len(need))
	for p := range need {
		want[p] = true
		paths = append(paths, p)
	}
	sort.Strings(paths)
	rc, err := files(ctx, paths)
	if err != nil {
		return stage, nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return stage, nil, fmt.Errorf("the workspace's files: %w", err)
		}
		if !want[h.Name] || h.Typeflag != tar.TypeReg {
			return stage, nil, protocol.Errorf(protocol.CodeCorrupt, "the workspace's files hold %q, which the pull did not ask for", h.Name)
		}
		delete(want, h.Name)
		name := "f" + strconv.Itoa(len(staged))
		w := need[h.Name]
		opts := fsguard.WriteOptions{NoSync: true, Verify: func(r fsguard.WriteResult) error {
			if r.Bytes != w.Size || r.SHA256 != w.SHA256 {
				return protocol.Errorf(protocol.CodeCorrupt, "%s: the bytes that came are not the workspace's (size or SHA-256)", h.Name)
			}
			return nil
		}}
		if w.Sparse {
			opts.Hash = snapshot.ContentHash(snapshot.Entry{Sparse: true, Size: w.Size})
		}
		if _, err := root.WriteFile(ctx, stage+"/"+name, tr, 0o600, opts); err != nil {
			return stage, nil, fmt.Errorf("stage %s: %w", h.Name, err)
		}
		staged[h.Name] = name
	}
	if len(want) > 0 {
		return stage, nil, protocol.Errorf(protocol.CodeCorrupt, "the workspace's files lack %d of those asked for", len(want))
	}
	return stage, staged, root.Sync()
}

func tempName(hint string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return path.Join(path.Dir(hint), fsguard.TempPrefix+hex.EncodeToString(b))
}
