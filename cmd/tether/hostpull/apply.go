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
	"path/filepath"
	"strconv"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// Options say how Apply resolves conflicts and where it keeps what it does not apply.
type Options struct {
	// Theirs applies the workspace's version of a conflicting path; the host's goes to the
	// recovery directory. Ours (and the default) keeps the host's; the workspace's goes there.
	Theirs bool
	// RecoveryDir receives the version of each conflicting path that is not kept (created on
	// first use, 0700).
	RecoveryDir string
	// Files streams the workspace's bytes of the named files as a tar, in tree order.
	Files func(ctx context.Context, paths []string) (io.ReadCloser, error)
}

// Result is what Apply did.
type Result struct {
	Applied   int    `json:"applied"`
	Conflicts int    `json:"conflicts"`
	Recovered int    `json:"recovered"`
	Recovery  string `json:"recovery_dir,omitempty"`
}

// Apply carries out plan on the host directory root. The workspace's bytes are fetched first,
// whole and checked, into a staging directory inside root; only then is the tree touched, so a
// transfer that fails writes nothing. Each file is then published by its own atomic rename,
// and one the host changed since the plan looked (its bytes are no longer the base's) is left
// alone and reported.
func Apply(ctx context.Context, root *fsguard.Root, plan *Plan, o Options) (Result, error) {
	res := Result{}
	take := func(it *Item) bool { return it.Action == ActApply || it.Action == ActConflict && o.Theirs }
	var need []string
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Workspace.Type == snapshot.TypeFile && (take(it) || it.Action == ActConflict) {
			need = append(need, it.Path)
		}
	}
	stage, staged, err := fetch(ctx, root, need, o.Files)
	if stage != "" {
		defer root.RemoveAll(stage)
	}
	if err != nil {
		return res, err
	}
	var rec *fsguard.Root
	recover := func(from func(*fsguard.Root) error) error {
		if rec == nil {
			if err := os.MkdirAll(o.RecoveryDir, 0o700); err != nil {
				return fmt.Errorf("recovery directory: %w", err)
			}
			if rec, err = fsguard.Open(o.RecoveryDir); err != nil {
				return fmt.Errorf("recovery directory: %w", err)
			}
			res.Recovery = o.RecoveryDir
		}
		res.Recovered++
		return from(rec)
	}
	defer func() {
		if rec != nil {
			rec.Close()
		}
	}()
	// Conflicts first: what is not kept is saved before anything changes.
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Action != ActConflict {
			continue
		}
		res.Conflicts++
		var err error
		if o.Theirs {
			if it.Host.Type != "" && it.Host.Type != snapshot.TypeDir {
				err = recover(func(rec *fsguard.Root) error { return copyOut(ctx, root, it.Path, it.Host, rec) })
			}
		} else if it.Workspace.Type != "" && it.Workspace.Type != snapshot.TypeDir {
			err = recover(func(rec *fsguard.Root) error { return place(ctx, rec, root, stage, staged, it, api.PathState{}) })
		}
		if err != nil {
			return res, fmt.Errorf("keep %s in %s: %w", it.Path, o.RecoveryDir, err)
		}
	}
	// Removals, deepest first, then everything written in tree order.
	for i := len(plan.Items) - 1; i >= 0; i-- {
		it := &plan.Items[i]
		if take(it) && it.Host.Type != "" && it.Host.Type != it.Workspace.Type {
			if err := root.Remove(it.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, applied(res, fmt.Errorf("remove %s: %w", it.Path, err))
			}
			if it.Workspace.Type == "" {
				res.Applied++
			}
		}
	}
	for i := range plan.Items {
		it := &plan.Items[i]
		if !take(it) || it.Workspace.Type == "" {
			continue
		}
		host := it.Host
		if host.Type != it.Workspace.Type {
			host = api.PathState{} // removed above
		}
		if err := place(ctx, root, root, stage, staged, it, host); err != nil {
			return res, applied(res, fmt.Errorf("write %s: %w", it.Path, err))
		}
		res.Applied++
	}
	return res, nil
}

func applied(res Result, err error) error {
	return fmt.Errorf("%w (%d paths applied before it; run the pull again to finish)", err, res.Applied)
}

// place makes it.Path in dst the workspace's version. host is what dst holds there now: a file
// is replaced only while it still holds those bytes.
func place(ctx context.Context, dst, root *fsguard.Root, stage string, staged map[string]string, it *Item, host api.PathState) error {
	w := it.Workspace
	mode := fs.FileMode(w.Mode & 0o777)
	if dst != root {
		if err := dst.MkdirAll(filepathDir(it.Path), 0o700); err != nil {
			return err
		}
	}
	switch w.Type {
	case snapshot.TypeDir:
		if host.Type == snapshot.TypeDir {
			return dst.Chmod(it.Path, mode)
		}
		if err := dst.Mkdir(it.Path, mode); err != nil {
			return err
		}
		return dst.Chmod(it.Path, mode) // past the umask
	case snapshot.TypeSymlink:
		tmp := tempName(it.Path)
		if err := dst.Symlink(w.LinkTarget, tmp); err != nil {
			return err
		}
		if err := dst.Rename(tmp, it.Path, fsguard.RenameOptions{Replace: host.Type == snapshot.TypeSymlink}); err != nil {
			dst.Remove(tmp)
			return err
		}
		return nil
	case snapshot.TypeFile:
		f, err := root.Open(stage + "/" + staged[it.Path])
		if err != nil {
			return err
		}
		defer f.Close()
		opts := fsguard.WriteOptions{Replace: host.Type == snapshot.TypeFile}
		if host.Type == snapshot.TypeFile && !host.Sparse {
			opts.IfSHA256 = host.SHA256
		}
		if w.Sparse {
			opts.Hash = snapshot.ContentHash(snapshot.Entry{Sparse: true, Size: w.Size})
		}
		opts.Verify = func(r fsguard.WriteResult) error {
			if r.Bytes != w.Size || r.SHA256 != w.SHA256 {
				return protocol.Errorf(protocol.CodeCorrupt, "%s: staged bytes differ from the workspace's", it.Path)
			}
			return nil
		}
		_, err = dst.WriteFile(ctx, it.Path, f, mode, opts)
		if protocol.CodeOf(err) == protocol.CodeConflict || fsguard.CodeOf(err) == string(protocol.CodeConflict) {
			return fmt.Errorf("the host changed it during the pull: %w", err)
		}
		return err
	}
	return fmt.Errorf("unknown type %q", w.Type)
}

// copyOut keeps the host's version of p (a file or a symlink) in rec.
func copyOut(ctx context.Context, root *fsguard.Root, p string, host api.PathState, rec *fsguard.Root) error {
	if err := rec.MkdirAll(filepathDir(p), 0o700); err != nil {
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
	_, err = rec.WriteFile(ctx, p, f, fs.FileMode(host.Mode&0o777), fsguard.WriteOptions{Replace: true})
	return err
}

// fetch streams the workspace's bytes of paths into a new staging directory in root, each
// checked against the plan's digest; it returns the directory and each path's staged name.
func fetch(ctx context.Context, root *fsguard.Root, paths []string, files func(context.Context, []string) (io.ReadCloser, error)) (string, map[string]string, error) {
	staged := make(map[string]string, len(paths))
	if len(paths) == 0 {
		return "", staged, nil
	}
	stage := tempName("pull")
	if err := root.Mkdir(stage, 0o700); err != nil {
		return "", nil, fmt.Errorf("staging directory: %w", err)
	}
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
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
		if _, err := root.WriteFile(ctx, stage+"/"+name, tr, 0o600, fsguard.WriteOptions{NoSync: true}); err != nil {
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
	return filepath.Join(filepathDir(hint), fsguard.TempPrefix+hex.EncodeToString(b))
}

func filepathDir(p string) string { return filepath.Dir(p) }
