package runner

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// Resumable uploads stage their bytes in the runner's private state directory (StateDir/uploads,
// or a private temporary directory without one): no confined command sees it, so nothing the
// agent does between two chunks can change what was staged, and the offset the runner reports
// is what it wrote and hashed itself. The running SHA-256 is kept in memory with the open file;
// a chunk that fails half-way is cut off again (the file truncated, the hash state restored), so
// the staged bytes always end on a chunk boundary. Sessions live as long as the runner process:
// a new process knows none, and a client resumes from offset 0.

// uploadTable holds the sessions this runner stages.
type uploadTable struct {
	stateDir string

	mu     sync.Mutex
	dir    string // created with the first session
	ownDir bool   // a temporary directory of the table's own, removed on close
	m      map[string]*upload
}

// upload is one staged session. Only the routine that marked it busy touches its file, offset
// and hash.
type upload struct {
	desc    protocol.FsUploadChunkArgs // the session's description (Offset and Length unused)
	busy    bool
	f       *os.File
	off     int64
	h       hash.Hash
	result  *protocol.FsWriteResult
	expires time.Time
}

func newUploadTable(stateDir string) *uploadTable {
	return &uploadTable{stateDir: stateDir, m: map[string]*upload{}}
}

// sameSession reports whether a chunk describes the session u stages.
func (u *upload) sameSession(a protocol.FsUploadChunkArgs) bool {
	d := u.desc
	return d.Path == a.Path && d.Size == a.Size && d.SHA256 == a.SHA256 && d.Mode == a.Mode && d.Replace == a.Replace
}

func (u *upload) status() protocol.FsUploadStatus {
	return protocol.FsUploadStatus{Session: u.desc.Session, Offset: u.off, Size: u.desc.Size, Done: u.result != nil, Result: u.result}
}

// drop closes and removes u's staged bytes.
func (u *upload) drop() {
	if u.f != nil {
		u.f.Close()
		os.Remove(u.f.Name())
		u.f = nil
	}
}

// expireLocked forgets the sessions past their expiry that nobody is using.
func (t *uploadTable) expireLocked(now time.Time) {
	for id, u := range t.m {
		if !u.busy && now.After(u.expires) {
			u.drop()
			delete(t.m, id)
		}
	}
}

// acquire finds the chunk's session, or starts it when the runner holds none, and marks it busy
// (one chunk of a session at a time: a second is conflict).
func (t *uploadTable) acquire(a protocol.FsUploadChunkArgs, now time.Time) (*upload, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	if u, ok := t.m[a.Session]; ok {
		if !u.sameSession(a) {
			return nil, protocol.Errorf(protocol.CodeConflict, "upload %s was started for another file (path, size, sha256, mode or replace differ)", a.Session)
		}
		if u.busy {
			return nil, protocol.Errorf(protocol.CodeConflict, "upload %s is receiving another chunk; ask its offset and resume from there", a.Session)
		}
		u.busy = true
		u.expires = a.ExpiresAt
		return u, nil
	}
	if len(t.m) >= protocol.MaxUploadSessions {
		return nil, protocol.Errorf(protocol.CodeTooLarge, "this runner already stages %d uploads; finish or abort one", len(t.m))
	}
	if err := t.ensureDirLocked(); err != nil {
		return nil, err
	}
	// The directory is the runner's alone; the name is the checked id.
	f, err := os.OpenFile(filepath.Join(t.dir, a.Session), os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("stage upload %s: %w", a.Session, err)
	}
	desc := a
	desc.Offset, desc.Length = 0, 0
	u := &upload{desc: desc, busy: true, f: f, h: sha256.New(), expires: a.ExpiresAt}
	t.m[a.Session] = u
	return u, nil
}

func (t *uploadTable) ensureDirLocked() error {
	if t.dir != "" {
		return nil
	}
	if t.stateDir == "" {
		d, err := os.MkdirTemp("", "tether-runner-uploads-")
		if err != nil {
			return fmt.Errorf("upload staging directory: %w", err)
		}
		t.dir, t.ownDir = d, true
		return nil
	}
	d := filepath.Join(t.stateDir, "uploads")
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("upload staging directory: %w", err)
	}
	t.dir = d
	return nil
}

// release ends a chunk's use of u; a session that failed for good (forget) is removed.
func (t *uploadTable) release(u *upload, forget bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u.busy = false
	if forget {
		u.drop()
		if t.m[u.desc.Session] == u {
			delete(t.m, u.desc.Session)
		}
	}
}

func (t *uploadTable) get(id string) (protocol.FsUploadStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.m[id]
	if !ok {
		return protocol.FsUploadStatus{}, false
	}
	if u.busy {
		// Its offset moves under a running chunk; what is staged for sure is where it began.
		return protocol.FsUploadStatus{Session: id, Offset: u.off, Size: u.desc.Size}, true
	}
	return u.status(), true
}

func (t *uploadTable) abort(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.m[id]
	if !ok {
		return nil
	}
	if u.busy {
		return protocol.Errorf(protocol.CodeConflict, "upload %s is receiving a chunk; abort it again once that ended", id)
	}
	u.drop()
	delete(t.m, id)
	return nil
}

// close removes every staged upload (the runner is shutting down).
func (t *uploadTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, u := range t.m {
		if u.f != nil {
			u.f.Close()
		}
		delete(t.m, id)
	}
	if t.dir != "" {
		os.RemoveAll(t.dir)
		if !t.ownDir {
			t.dir = ""
		}
	}
}

func checkChunkArgs(a protocol.FsUploadChunkArgs) error {
	switch {
	case !protocol.ValidUploadID(a.Session):
		return protocol.Errorf(protocol.CodeInvalidArgument, "upload id %q is malformed", a.Session)
	case a.Size < 0 || a.Offset < 0 || a.Length < 0:
		return protocol.Errorf(protocol.CodeInvalidArgument, "negative size, offset or length")
	case a.Length > protocol.MaxUploadChunk:
		return protocol.Errorf(protocol.CodeTooLarge, "a chunk of %d bytes exceeds %d", a.Length, protocol.MaxUploadChunk)
	case a.Offset > a.Size || a.Length > a.Size-a.Offset:
		return protocol.Errorf(protocol.CodeInvalidRange, "a chunk of %d bytes at offset %d goes past the upload's %d bytes", a.Length, a.Offset, a.Size)
	case len(a.SHA256) != 64 || strings.ToLower(a.SHA256) != a.SHA256:
		return protocol.Errorf(protocol.CodeInvalidArgument, "sha256 %q: want 64 lowercase hex digits", a.SHA256)
	case a.Mode&^0o777 != 0:
		return protocol.Errorf(protocol.CodeInvalidArgument, "mode %o: only permission bits (0777) can be set", a.Mode)
	}
	if _, err := hex.DecodeString(a.SHA256); err != nil {
		return protocol.Errorf(protocol.CodeInvalidArgument, "sha256 %q: want 64 lowercase hex digits", a.SHA256)
	}
	return nil
}

// fsUploadChunk stages one chunk (the stream's body) and, once the whole file is staged and its
// SHA-256 is the declared one, publishes it like fs_write does (temp beside the target, fsync,
// rename). A chunk at the wrong offset is conflict, naming the offset the runner holds.
func (r *Runner) fsUploadChunk(ctx context.Context, st *yamux.Stream, args protocol.FsUploadChunkArgs) (protocol.FsUploadStatus, error) {
	if err := checkChunkArgs(args); err != nil {
		return protocol.FsUploadStatus{}, err
	}
	u, err := r.uploads.acquire(args, r.cfg.Clock.Now())
	if err != nil {
		return protocol.FsUploadStatus{}, err
	}
	forget := false
	defer func() { r.uploads.release(u, forget) }()
	if u.result != nil {
		// Published already: a repeat of the last chunk (its answer was lost) learns so.
		return u.status(), nil
	}
	if args.Offset != u.off {
		return u.status(), protocol.Errorf(protocol.CodeConflict, "upload %s is at offset %d, not %d", args.Session, u.off, args.Offset)
	}
	if args.Length == 0 && u.off < u.desc.Size {
		return u.status(), protocol.Errorf(protocol.CodeInvalidArgument, "an empty chunk before the end of upload %s", args.Session)
	}
	if err := u.append(ctx, protocol.NewBodyReader(st), args.Length); err != nil {
		return u.status(), err
	}
	if u.off < u.desc.Size {
		return u.status(), nil
	}
	sum := hex.EncodeToString(u.h.Sum(nil))
	if sum != u.desc.SHA256 {
		forget = true
		return protocol.FsUploadStatus{Session: args.Session, Size: u.desc.Size}, protocol.Errorf(protocol.CodeCorrupt,
			"the %d bytes of upload %s hash to %s, not the declared %s: nothing was published and the session is dropped", u.off, args.Session, sum, u.desc.SHA256)
	}
	res, err := r.publishUpload(ctx, u, sum)
	if err != nil {
		// The bytes stay staged: a zero-length chunk at the end publishes again (after the
		// target that was in the way is gone, say).
		return u.status(), err
	}
	u.result = &res
	u.drop()
	return u.status(), nil
}

// append writes exactly n bytes of body at u's offset, hashing them. On any failure the staged
// file and the hash are put back as they were before the chunk.
func (u *upload) append(ctx context.Context, body io.Reader, n int64) error {
	start := u.off
	state, err := u.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return fmt.Errorf("upload hash state: %w", err)
	}
	written, err := u.copyChunk(ctx, body, n)
	if err == nil && written != n {
		err = protocol.Errorf(protocol.CodeInvalidArgument, "the chunk carried %d bytes, not the %d announced", written, n)
	}
	if err != nil {
		if terr := u.f.Truncate(start); terr != nil {
			// The staged bytes cannot be trusted any more: the session starts over.
			u.f.Close()
			u.f = nil
			return fmt.Errorf("cut back upload %s: %w", u.desc.Session, terr)
		}
		if herr := u.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); herr != nil {
			return fmt.Errorf("restore upload hash state: %w", herr)
		}
		return err
	}
	u.off = start + n
	return nil
}

func (u *upload) copyChunk(ctx context.Context, body io.Reader, n int64) (int64, error) {
	if u.f == nil {
		return 0, protocol.Errorf(protocol.CodeFailed, "upload %s lost its staged bytes; abort it and start again", u.desc.Session)
	}
	w := &fsguard.Writeback{F: u.f}
	if _, err := u.f.Seek(u.off, io.SeekStart); err != nil {
		return 0, err
	}
	buf := make([]byte, 256<<10)
	var done int64
	// One byte more than announced is read to tell an over-long body from an exact one.
	src := io.LimitReader(body, n+1)
	for {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		m, rerr := src.Read(buf)
		if m > 0 {
			if done+int64(m) > n {
				return done + int64(m), protocol.Errorf(protocol.CodeInvalidRange, "the chunk carried more than the %d bytes announced", n)
			}
			u.h.Write(buf[:m])
			if _, err := w.Write(buf[:m]); err != nil {
				return done, err
			}
			done += int64(m)
		}
		if rerr == io.EOF {
			return done, nil
		}
		if rerr != nil {
			return done, rerr
		}
	}
}

// publishUpload moves the staged file into place by one rename when the state directory and
// the workspace share a filesystem (fsguard.Adopt); else it copies the staged bytes beside the
// target and renames them into place. The bytes were hashed as they arrived, and nobody else
// writes the staged file, so they are not hashed again: the digest reported is the one already
// checked.
func (r *Runner) publishUpload(ctx context.Context, u *upload, sum string) (protocol.FsWriteResult, error) {
	mode := fs.FileMode(u.desc.Mode)
	if mode == 0 {
		mode = defaultFileMode
	}
	var out protocol.FsWriteResult
	err := r.onRootPath(u.desc.Path, func(root *fsguard.Root, clean string) error {
		if err := u.f.Chmod(mode); err != nil {
			return fmt.Errorf("chmod staged upload: %w", err)
		}
		if err := u.f.Sync(); err != nil {
			return fmt.Errorf("sync staged upload: %w", err)
		}
		err := root.Adopt(u.f.Name(), clean, u.desc.Replace)
		if err == nil {
			out = protocol.FsWriteResult{Path: clean, Bytes: u.desc.Size, SHA256: sum}
			return nil
		}
		if !errors.Is(err, unix.EXDEV) {
			return err
		}
		src := io.NewSectionReader(u.f, 0, u.desc.Size)
		res, err := root.WriteFile(ctx, clean, src, mode, fsguard.WriteOptions{Replace: u.desc.Replace, Hash: knownDigest(sum),
			Verify: func(res fsguard.WriteResult) error {
				if res.Bytes != u.desc.Size {
					return protocol.Errorf(protocol.CodeFailed, "copied %d of the %d staged bytes", res.Bytes, u.desc.Size)
				}
				return nil
			}})
		if err != nil {
			return err
		}
		out = protocol.FsWriteResult{Path: clean, Bytes: res.Bytes, SHA256: res.SHA256}
		return nil
	})
	return out, err
}

func (r *Runner) fsUploadStatus(_ context.Context, _ *yamux.Stream, args protocol.FsUploadSessionArgs) (protocol.FsUploadStatus, error) {
	st, ok := r.uploads.get(args.Session)
	if !ok {
		return st, protocol.Errorf(protocol.CodeNotFound, "this runner stages nothing of upload %q", args.Session)
	}
	return st, nil
}

func (r *Runner) fsUploadAbort(_ context.Context, _ *yamux.Stream, args protocol.FsUploadSessionArgs) (struct{}, error) {
	return struct{}{}, r.uploads.abort(args.Session)
}

// knownDigest is a hash.Hash for fsguard.WriteOptions.Hash that hashes nothing and reports a
// digest computed before: for content already hashed on its way in.
type knownDigest string

func (knownDigest) Write(p []byte) (int, error) { return len(p), nil }
func (d knownDigest) Sum(b []byte) []byte {
	raw, _ := hex.DecodeString(string(d))
	return append(b, raw...)
}
func (knownDigest) Reset()         {}
func (knownDigest) Size() int      { return sha256.Size }
func (knownDigest) BlockSize() int { return sha256.BlockSize }
