package runner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"github.com/tetherhq/tether/sandbox/stableread"
	"golang.org/x/sys/unix"
)

// defaultFileMode is the mode of a written file when the caller names none.
const defaultFileMode = 0o644

// withRoot opens the workspace root for one operation.
func (r *Runner) withRoot(fn func(root *fsguard.Root) error) error {
	root, err := fsguard.Open(r.root, fsguard.WithHolds(r.holds))
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root)
}

// onRootPath opens the workspace root for one operation and resolves rel there with the guard:
// fn gets the root and the clean path.
func (r *Runner) onRootPath(rel string, fn func(root *fsguard.Root, clean string) error) error {
	return r.withRoot(func(root *fsguard.Root) error {
		clean, err := fsguard.Clean(rel)
		if err != nil {
			return err
		}
		return fn(root, clean)
	})
}

func fileInfo(root *fsguard.Root, rel string, fi fs.FileInfo) protocol.FileInfo {
	out := protocol.FileInfo{Path: rel, Name: fi.Name(), Mode: uint32(fi.Mode().Perm()), Size: fi.Size(), MTime: fi.ModTime().UTC()}
	if rel == "." {
		out.Name = "."
	}
	switch {
	case fi.Mode().IsRegular():
		out.Type = protocol.FileRegular
	case fi.IsDir():
		out.Type = protocol.FileDir
	case fi.Mode()&fs.ModeSymlink != 0:
		out.Type = protocol.FileSymlink
		if target, err := root.Readlink(rel); err == nil {
			out.LinkTarget = target
		}
	default:
		out.Type = protocol.FileOther
	}
	return out
}

func (r *Runner) fsStat(_ context.Context, _ *yamux.Stream, args protocol.FsPathArgs) (protocol.FileInfo, error) {
	return r.onPath(args.Path, nil)
}

// onPath resolves rel with the guard, applies fn (when not nil) and describes the result.
func (r *Runner) onPath(rel string, fn func(root *fsguard.Root, clean string) error) (protocol.FileInfo, error) {
	var out protocol.FileInfo
	err := r.onRootPath(rel, func(root *fsguard.Root, clean string) error {
		if fn != nil {
			if err := fn(root, clean); err != nil {
				return err
			}
		}
		fi, err := root.Lstat(clean)
		if err != nil {
			return err
		}
		out = fileInfo(root, clean, fi)
		return nil
	})
	return out, err
}

func (r *Runner) fsList(_ context.Context, _ *yamux.Stream, args protocol.FsListArgs) (protocol.FsListResult, error) {
	if args.Limit <= 0 || args.Limit > protocol.MaxListPage {
		args.Limit = protocol.MaxListPage
	}
	out := protocol.FsListResult{Entries: []protocol.FileInfo{}}
	err := r.onRootPath(args.Path, func(root *fsguard.Root, clean string) error {
		dir, err := root.OpenDir(clean)
		if err != nil {
			return err
		}
		defer dir.Close()
		entries, err := dir.ReadDir(".")
		if err != nil {
			return err
		}
		// Entries come sorted by name; the cursor is the last name of the previous page.
		start := sort.Search(len(entries), func(i int) bool { return entries[i].Name() > args.Cursor })
		for _, e := range entries[start:] {
			if len(out.Entries) == args.Limit {
				out.Next = out.Entries[len(out.Entries)-1].Name
				break
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			info := fileInfo(dir, e.Name(), fi)
			info.Path = path.Join(clean, e.Name())
			out.Entries = append(out.Entries, info)
		}
		return nil
	})
	return out, err
}

func (r *Runner) fsMkdir(_ context.Context, _ *yamux.Stream, args protocol.FsPathArgs) (protocol.FileInfo, error) {
	mode := fs.FileMode(args.Mode).Perm()
	if mode == 0 {
		mode = 0o755
	}
	return r.onPath(args.Path, func(root *fsguard.Root, clean string) error {
		if args.Parents {
			return root.MkdirAll(clean, mode)
		}
		return root.Mkdir(clean, mode)
	})
}

func (r *Runner) fsRemove(_ context.Context, _ *yamux.Stream, args protocol.FsPathArgs) (struct{}, error) {
	return struct{}{}, r.onRootPath(args.Path, func(root *fsguard.Root, clean string) error {
		if clean == "." {
			return protocol.Errorf(protocol.CodeInvalidArgument, "the workspace root cannot be removed")
		}
		if args.Recursive {
			// RemoveAll succeeds on a missing path; a remove of nothing is an error here.
			if _, err := root.Lstat(clean); err != nil {
				return err
			}
			return root.RemoveAll(clean)
		}
		err := root.Remove(clean)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return protocol.Errorf(protocol.CodeConflict, "%s is a directory that is not empty; remove it recursively", clean)
		}
		return err
	})
}

func (r *Runner) fsRename(_ context.Context, _ *yamux.Stream, args protocol.FsRenameArgs) (protocol.FileInfo, error) {
	var out protocol.FileInfo
	err := r.onRootPath(args.From, func(root *fsguard.Root, from string) error {
		to, err := fsguard.Clean(args.To)
		if err != nil {
			return err
		}
		if from == "." || to == "." {
			return protocol.Errorf(protocol.CodeInvalidArgument, "the workspace root cannot be renamed")
		}
		if err := root.Rename(from, to, fsguard.RenameOptions{Replace: args.Replace}); err != nil {
			if fsguard.CodeOf(err) == "" && errors.Is(err, unix.EISDIR) {
				// Replacing a directory with a file: a refusal, not an internal failure.
				return protocol.Errorf(protocol.CodeExists, "%s: a directory exists at the destination", to)
			}
			return err
		}
		fi, err := root.Lstat(to)
		if err != nil {
			return err
		}
		out = fileInfo(root, to, fi)
		return nil
	})
	return out, err
}

func (r *Runner) fsChmod(_ context.Context, _ *yamux.Stream, args protocol.FsPathArgs) (protocol.FileInfo, error) {
	if args.Mode&^0o777 != 0 {
		return protocol.FileInfo{}, protocol.Errorf(protocol.CodeInvalidArgument, "mode %o: only permission bits (0777) can be set", args.Mode)
	}
	return r.onPath(args.Path, func(root *fsguard.Root, clean string) error {
		// The root's mode is the sandbox's, not the tree's: a root the workspace's own user may
		// not enter any more would lock out the runner, which acts with that user's rights.
		if clean == "." {
			return protocol.Errorf(protocol.CodeInvalidArgument, "the workspace root's mode is not changed; chmod what is in it")
		}
		return root.Chmod(clean, fs.FileMode(args.Mode))
	})
}

// fsWrite streams the body into a temp file beside the target and publishes it only when the
// body arrived whole (its terminator's count and SHA-256 match) and, when given, matches the
// sender's SHA-256 and the expected current content.
func (r *Runner) fsWrite(ctx context.Context, st *yamux.Stream, args protocol.FsWriteArgs) (protocol.FsWriteResult, error) {
	mode := fs.FileMode(args.Mode)
	if mode == 0 {
		mode = defaultFileMode
	}
	if mode&^0o777 != 0 {
		return protocol.FsWriteResult{}, protocol.Errorf(protocol.CodeInvalidArgument, "mode %o: only permission bits (0777) can be set", args.Mode)
	}
	if args.SHA256Trailer && args.SHA256 != "" {
		return protocol.FsWriteResult{}, protocol.Errorf(protocol.CodeInvalidArgument, "a write's SHA-256 comes either with its arguments or after its body, not both")
	}
	var out protocol.FsWriteResult
	err := r.onRootPath(args.Path, func(root *fsguard.Root, clean string) error {
		body := protocol.NewBodyReader(st)
		opts := fsguard.WriteOptions{Replace: args.Replace, IfSHA256: strings.ToLower(args.IfSHA256), MaxBytes: args.MaxBytes,
			// Called once the body was read to its end, so its terminator is in.
			Verify: func(res fsguard.WriteResult) error {
				want := args.SHA256
				if args.SHA256Trailer {
					if want = body.Result.SHA256; want == "" {
						return protocol.Errorf(protocol.CodeInvalidArgument, "the body ended without the SHA-256 it was to carry")
					}
				}
				if want != "" && !strings.EqualFold(want, res.SHA256) {
					return protocol.Errorf(protocol.CodeFailed, "content hashes to %s, the sender said %s", res.SHA256, want)
				}
				return nil
			}}
		res, err := root.WriteFile(ctx, clean, body, mode, opts)
		if err != nil {
			return err
		}
		out = protocol.FsWriteResult{Path: clean, Bytes: res.Bytes, SHA256: res.SHA256}
		return nil
	})
	return out, err
}

// fsRead answers with a reply (what will be sent), the body, then a trailer. A file that changes
// while it is read fails the trailer, so the receiver never takes a torn read for a good one.
func (r *Runner) fsRead(_ context.Context, st *yamux.Stream, args protocol.FsReadArgs) {
	err := r.onRootPath(args.Path, func(root *fsguard.Root, clean string) error {
		// Refuse what is not a regular file before opening it: opening a device runs its
		// driver, and a socket cannot be opened at all (ENXIO). Open checks again on the
		// descriptor, so a swap after this look changes nothing.
		if fi, err := root.Lstat(clean); err != nil {
			return err
		} else if !fi.Mode().IsRegular() {
			return notRegular(clean, fi)
		}
		f, err := root.Open(clean)
		if err != nil {
			if fsguard.CodeOf(err) == "" && errors.Is(err, unix.ENXIO) {
				return protocol.Errorf(protocol.CodeInvalidArgument, "%s is not a regular file", clean)
			}
			return err
		}
		defer f.Close()
		// Begin stats the file and probes it for writers before the first byte; Check then
		// tells a torn read from a good one (see package stableread).
		rd, err := stableread.Begin(f, clean)
		if err != nil {
			return err
		}
		before := rd.Info()
		if !before.Mode().IsRegular() {
			return protocol.Errorf(protocol.CodeInvalidArgument, "%s is not a regular file", clean)
		}
		off, n, err := args.Resolve(before.Size())
		if err != nil {
			return err
		}
		reply := protocol.FsReadReply{Info: fileInfo(root, clean, before), Offset: off, Length: n}
		writeTrailer(st, reply, nil)
		// From here on the reply is sent: failures go in the final trailer.
		stopWatch := abandonWatch(st)
		defer stopWatch()
		// The digest goes in the terminator: the controller passes it on, the client checks it.
		bw := protocol.NewBodyWriter(st).WithSHA256()
		_ = st.SetWriteDeadline(time.Time{})
		if _, err := io.Copy(bw, io.NewSectionReader(f, off, n)); err != nil {
			writeTrailer(st, nil, fmt.Errorf("read %s: %w", clean, err))
			return nil
		}
		sent, err := bw.Finish()
		if err != nil {
			return nil
		}
		sum, err := hex.DecodeString(sent.SHA256)
		if err == nil {
			err = rd.Check(context.Background(), off, n, sum)
		}
		writeTrailer(st, nil, err)
		return nil
	})
	if err != nil {
		writeTrailer(st, nil, err)
	}
}

// notRegular refuses to read an entry that is not a regular file, naming what it is.
func notRegular(clean string, fi fs.FileInfo) error {
	kind := "not a regular file"
	switch {
	case fi.IsDir():
		kind = "a directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		return protocol.Errorf(protocol.CodeSymlinkRefused, "%s is a symlink; it is never followed", clean)
	case fi.Mode()&fs.ModeNamedPipe != 0:
		kind = "a fifo"
	case fi.Mode()&fs.ModeSocket != 0:
		kind = "a socket"
	case fi.Mode()&fs.ModeDevice != 0:
		kind = "a device"
	}
	return protocol.Errorf(protocol.CodeInvalidArgument, "%s is %s, not a regular file", clean, kind)
}

// abandonWatch closes st when the controller closes its side while the runner is still sending:
// the controller only does that when its client went away, and closing unblocks a write that
// would otherwise wait forever for window the controller will never grant.
func abandonWatch(st *yamux.Stream) (stop func()) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, st)
		select {
		case <-done:
		default:
			st.Close()
		}
	}()
	return func() { close(done) }
}
