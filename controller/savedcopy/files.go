package savedcopy

import (
	"archive/tar"
	"context"
	"fmt"
	"io"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/snapshot"
)

// CheckFiles checks that every path names a regular file of snap (not under .git), before a
// byte of Files is sent: a bad request is a typed error, not a stream cut short. It returns the
// set Files takes.
func (a Archives) CheckFiles(ctx context.Context, snap api.Snapshot, paths []string) (map[string]bool, error) {
	if len(paths) > api.MaxFilesRequest {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "%d paths: at most %d in one request", len(paths), api.MaxFilesRequest)
	}
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return nil, err
		}
		if underGit(p) {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "%s: a repository's files are not sent as files", p)
		}
		want[p] = false
	}
	rr, err := a.OpenResolved(ctx, snap)
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	for {
		e, err := rr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if _, ok := want[e.Path]; ok {
			if e.Type != snapshot.TypeFile {
				return nil, protocol.Errorf(protocol.CodeInvalidArgument, "%s is a %s in snapshot %s, not a file", e.Path, e.Type, snap.ID)
			}
			want[e.Path] = true
		}
	}
	for p, found := range want {
		if !found {
			return nil, protocol.Errorf(protocol.CodeNotFound, "snapshot %s holds no %s", snap.ID, p)
		}
	}
	return want, nil
}

// Files writes the regular files of snap named in want as tar entries (name: the path, mode:
// the permission bits, size, mtime), in tree order. Each file's bytes come from the layer that
// holds them and are checked against the manifest's digest as they pass; a mismatch fails the
// stream (the caller cuts it off) — the reader checks each file's digest too, so a cut entry
// is never taken for a whole one. Each layer is read once, front to back, only as far as the
// last file it is asked for.
func (a Archives) Files(ctx context.Context, snap api.Snapshot, want map[string]bool, tw *tar.Writer) error {
	if snap.ReclaimedAt != nil {
		return protocol.Errorf(protocol.CodeNotFound, "snapshot %s was reclaimed by gc", snap.ID)
	}
	if a.Pin != nil {
		release, err := a.Pin(ctx, snap)
		if err != nil {
			return err
		}
		defer release()
	}
	rr, err := a.OpenResolved(ctx, snap)
	if err != nil {
		return err
	}
	defer rr.Close()
	layers := a.newLayerSet(snap, rr)
	defer layers.close()
	buf := make([]byte, 256<<10)
	for left := len(want); left > 0; {
		e, err := rr.Next()
		if err == io.EOF {
			return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: %d requested files missing from its manifest", snap.ID, left)
		}
		if err != nil {
			return err
		}
		if e.Type != snapshot.TypeFile || !want[e.Path] {
			continue
		}
		left--
		r, err := layers.file(ctx, &e)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.Path, Typeflag: tar.TypeReg, Mode: int64(e.Mode & 0o777), Size: e.Size,
			ModTime: e.MTime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		h := snapshot.ContentHash(e.Entry)
		n, err := io.CopyBuffer(io.MultiWriter(tw, h), io.LimitReader(r, e.Size), buf)
		if err != nil {
			return err
		}
		if n != e.Size || fmt.Sprintf("%x", h.Sum(nil)) != e.SHA256 {
			return protocol.Errorf(protocol.CodeCorrupt, "snapshot %s: the stored bytes of %s differ from its manifest", snap.ID, e.Path)
		}
	}
	return tw.Close()
}
