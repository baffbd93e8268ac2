package daytona

import (
	"context"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/plugins/provider"
)

var _ provider.Exporter = (*Provider)(nil)

// Bounds on what a sandbox's listing may make the export walk: a hostile or
// broken sandbox must not make the provider loop or hold unbounded state.
const (
	exportMaxDepth   = 64
	exportMaxEntries = 200000
)

// remoteFile is one regular file of the sandbox's workspace.
type remoteFile struct {
	rel   string // slash separated, relative to the workspace root; checked local
	size  int64
	mtime time.Time
	perm  os.FileMode
}

// ExportFiles copies the allocation's workspace (the sandbox's
// <project dir>/workspace) into req.Dest through the toolbox file API: a
// recursive listing, then one download per file. See provider.Exporter for
// the guarantees; the whole listing is checked (names, sizes, MaxBytes)
// before anything is written.
func (p *Provider) ExportFiles(ctx context.Context, req provider.ExportRequest) (provider.ExportResult, error) {
	var res provider.ExportResult
	if req.Dest == "" || !filepath.IsAbs(req.Dest) || strings.ContainsRune(req.Dest, 0) {
		return res, provider.Errorf(provider.CodeInvalidArgument, "export destination %q is not an absolute path", req.Dest)
	}
	if req.MaxBytes <= 0 {
		return res, provider.Errorf(provider.CodeInvalidArgument, "export max bytes must be positive, not %d", req.MaxBytes)
	}
	unlock := p.lock(req.AllocationID)
	defer unlock()
	cli, sb, err := p.owned(ctx, req.AllocationID)
	if err != nil {
		return res, err
	}
	if sb.State != StateStarted {
		return res, provider.Errorf(provider.CodeFailedPrecondition, "allocation %s's sandbox is %s; its files can be exported only while it is started", req.AllocationID, sb.State)
	}
	tb, err := cli.Toolbox(ctx, sb)
	if err != nil {
		return res, err
	}
	ps, err := sandboxPaths(ctx, tb)
	if err != nil {
		return res, err
	}
	root := ps.root
	files, err := listTree(ctx, tb, sb.ID, root)
	if err != nil {
		return res, err
	}
	var listed int64
	for _, f := range files {
		listed += f.size
		if listed > req.MaxBytes {
			return res, provider.Errorf(provider.CodeTooLarge, "allocation %s's workspace lists more than %d bytes", req.AllocationID, req.MaxBytes)
		}
	}

	dest := filepath.Clean(req.Dest)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return res, provider.Errorf(provider.CodeFailedPrecondition, "export destination: %v", err)
	}
	if fi, err := os.Stat(dest); err != nil || !fi.IsDir() {
		return res, provider.Errorf(provider.CodeFailedPrecondition, "export destination %s is not a directory", dest)
	}

	x := &exportRun{tb: tb, sandbox: sb.ID, root: root, dest: dest, max: req.MaxBytes, temps: map[string]bool{}}
	defer x.cleanup()
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := x.copyOne(ctx, f, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// listTree lists every regular file under root, depth first, sorted. Each
// name from the listing must be a single local path element.
func listTree(ctx context.Context, tb *Toolbox, sandbox, root string) ([]remoteFile, error) {
	var out []remoteFile
	entries := 0
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > exportMaxDepth {
			return provider.Errorf(provider.CodeProviderFailed, "sandbox %s's workspace is nested deeper than %d", sandbox, exportMaxDepth)
		}
		list, err := tb.ListFiles(ctx, path.Join(root, rel))
		if err != nil {
			return typed("list files of "+sandbox, err)
		}
		for _, fi := range list {
			entries++
			if entries > exportMaxEntries {
				return provider.Errorf(provider.CodeTooLarge, "sandbox %s's workspace has more than %d entries", sandbox, exportMaxEntries)
			}
			if !safeName(fi.Name) {
				return provider.Errorf(provider.CodePathEscape, "sandbox %s lists an unsafe file name %q; refusing to export", sandbox, fi.Name)
			}
			r := path.Join(rel, fi.Name)
			if !filepath.IsLocal(filepath.FromSlash(r)) {
				return provider.Errorf(provider.CodePathEscape, "sandbox %s lists a path %q outside its workspace; refusing to export", sandbox, r)
			}
			if fi.IsDir {
				if err := walk(r, depth+1); err != nil {
					return err
				}
				continue
			}
			if fi.Size < 0 {
				return provider.Errorf(provider.CodeProviderFailed, "sandbox %s lists %s with size %d", sandbox, r, fi.Size)
			}
			stamp := fi.ModifiedAt
			if stamp == "" {
				stamp = fi.ModTime // older daemons
			}
			mt, err := parseModTime(stamp)
			if err != nil {
				return provider.Errorf(provider.CodeProviderFailed, "sandbox %s lists %s with modification time %q: %v", sandbox, r, stamp, err)
			}
			out = append(out, remoteFile{rel: r, size: fi.Size, mtime: mt, perm: filePerm(fi.Permissions)})
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, nil
}

// safeName reports whether a listed name is one plain path element.
func safeName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\\\x00")
}

// parseModTime reads the listing's modTime: RFC 3339, or the daemon's Go
// time.Time.String form.
func parseModTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	s, _, _ = strings.Cut(s, " m=") // a monotonic clock reading, if any
	return time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", s)
}

// filePerm keeps the listing's permission bits, without group/other write
// or special bits; 0644 when they are absent.
func filePerm(s string) os.FileMode {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 8, 32)
	if err != nil || v == 0 {
		return 0o644
	}
	return os.FileMode(v) & 0o755
}

// exportRun is one ExportFiles call's copy state.
type exportRun struct {
	tb      *Toolbox
	sandbox string
	root    string
	dest    string
	max     int64
	total   int64
	// temps are the temp files this call made and has not published.
	temps map[string]bool
}

// cleanup removes every temp file the call made and did not publish.
func (x *exportRun) cleanup() {
	for t := range x.temps {
		_ = os.Remove(t)
	}
}

// mkParents makes the directories of rel under dest (0755), refusing a
// symlink or a non-directory on the way, so nothing lands outside dest.
func (x *exportRun) mkParents(rel string) (string, error) {
	cur := x.dest
	parts := strings.Split(rel, "/")
	for _, el := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, el)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return "", provider.Errorf(provider.CodeFailedPrecondition, "export: %v", err)
			}
			if fi, err = os.Lstat(cur); err != nil {
				return "", provider.Errorf(provider.CodeFailedPrecondition, "export: %v", err)
			}
		case err != nil:
			return "", provider.Errorf(provider.CodeFailedPrecondition, "export: %v", err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return "", provider.Errorf(provider.CodeSymlinkRefused, "export: %s is a symlink on the host; refusing to write through it", cur)
		}
		if !fi.IsDir() {
			return "", provider.Errorf(provider.CodeConflict, "export: %s is not a directory on the host", cur)
		}
	}
	return filepath.Join(x.dest, filepath.FromSlash(rel)), nil
}

// hostKeeps reports whether the host file at target must be left as it is
// (it is not older than the sandbox's), and whether it is newer.
func hostKeeps(target string, mtime time.Time) (keep, newer bool, err error) {
	fi, err := os.Lstat(target)
	if errors.Is(err, os.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, provider.Errorf(provider.CodeFailedPrecondition, "export: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return false, false, provider.Errorf(provider.CodeSymlinkRefused, "export: %s is not a regular file on the host; refusing to replace it", target)
	}
	if fi.ModTime().Before(mtime) {
		return false, false, nil
	}
	return true, fi.ModTime().After(mtime), nil
}

// copyOne downloads f into a temp file beside its target and publishes it,
// unless the host's file is not older.
func (x *exportRun) copyOne(ctx context.Context, f remoteFile, res *provider.ExportResult) error {
	target, err := x.mkParents(f.rel)
	if err != nil {
		return err
	}
	if keep, newer, err := hostKeeps(target, f.mtime); err != nil || keep {
		if newer {
			res.Skipped = append(res.Skipped, f.rel)
		}
		return err
	}
	if x.total+f.size > x.max {
		return provider.Errorf(provider.CodeTooLarge, "export of %s would pass %d bytes", f.rel, x.max)
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".tether-export-*")
	if err != nil {
		return provider.Errorf(provider.CodeFailedPrecondition, "export: %v", err)
	}
	x.temps[tmp.Name()] = true
	n, err := x.fill(ctx, tmp, f)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = provider.Errorf(provider.CodeFailedPrecondition, "export %s: %v", f.rel, cerr)
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), f.perm)
	}
	if err == nil {
		err = os.Chtimes(tmp.Name(), f.mtime, f.mtime)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		delete(x.temps, tmp.Name())
		if provider.ErrorCode(err) == "" && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			err = provider.Errorf(provider.CodeFailedPrecondition, "export %s: %v", f.rel, err)
		}
		return err
	}
	// The host file may have changed while the file streamed: check again.
	keep, newer, err := hostKeeps(target, f.mtime)
	if err == nil && !keep {
		if err = os.Rename(tmp.Name(), target); err != nil {
			err = provider.Errorf(provider.CodeFailedPrecondition, "export %s: %v", f.rel, err)
		}
	}
	if err != nil || keep {
		_ = os.Remove(tmp.Name())
		delete(x.temps, tmp.Name())
		if newer {
			res.Skipped = append(res.Skipped, f.rel)
		}
		return err
	}
	delete(x.temps, tmp.Name())
	syncDir(filepath.Dir(target))
	x.total += n
	res.Files++
	res.Bytes += n
	return nil
}

// fill streams f's download into w, requires exactly the listed size within
// the call's budget, and syncs w.
func (x *exportRun) fill(ctx context.Context, w *os.File, f remoteFile) (int64, error) {
	remote := path.Join(x.root, f.rel)
	rc, err := x.tb.Download(ctx, remote)
	if err != nil {
		return 0, typed("download "+remote+" from "+x.sandbox, err)
	}
	defer rc.Close()
	// One byte past the listed size tells a longer stream from an exact one.
	n, err := io.Copy(w, io.LimitReader(rc, f.size+1))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return n, ctxErr
		}
		return n, provider.Errorf(provider.CodeUnavailable, "download %s from %s broke after %d of %d bytes: %v", remote, x.sandbox, n, f.size, err)
	}
	switch {
	case n > f.size:
		return n, provider.Errorf(provider.CodeProviderFailed, "download %s from %s is longer than the %d bytes listed", remote, x.sandbox, f.size)
	case n < f.size:
		return n, provider.Errorf(provider.CodeUnavailable, "download %s from %s ended after %d of %d bytes listed", remote, x.sandbox, n, f.size)
	case x.total+n > x.max:
		return n, provider.Errorf(provider.CodeTooLarge, "export of %s would pass %d bytes", f.rel, x.max)
	}
	if err := w.Sync(); err != nil {
		return n, provider.Errorf(provider.CodeFailedPrecondition, "export %s: fsync: %v", f.rel, err)
	}
	return n, nil
}

// syncDir makes a rename in dir durable; best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
