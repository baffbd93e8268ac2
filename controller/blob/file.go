package blob

import (
	"github.com/tetherhq/tether/sandbox/fsguard"

	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// dirStore keeps each object as a file DIR/KEY; temporaries live in DIR/.tmp/.
type dirStore struct {
	dir string
	options
}

// OpenDir opens (creating, mode 0700) a directory store.
func OpenDir(dir string, opts ...Option) (Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, errorf(CodeInvalidArgument, err, "blob directory %q", dir)
	}
	if err := os.MkdirAll(filepath.Join(abs, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("blob directory: %w", err)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("blob directory: %w", err)
	}
	return &dirStore{dir: abs, options: collect(opts)}, nil
}

func (s *dirStore) String() string { return "file://" + s.dir }

func (s *dirStore) path(key string) string { return filepath.Join(s.dir, filepath.FromSlash(key)) }

// Put writes an O_EXCL temporary in DIR/.tmp, fsyncs it, checks size and hash, renames it into
// place and fsyncs the directories it changed.
func (s *dirStore) Put(ctx context.Context, key string, r io.Reader, want string) (_ Info, err error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	want, err = validWant(want)
	if err != nil {
		return Info{}, err
	}
	if err := ctxError(ctx, "blob put "+key); err != nil {
		return Info{}, err
	}
	tmp := filepath.Join(s.dir, tmpDir, randomName())
	// The sweep here is local, but the tracker's contract is the same as for S3. Deferred first,
	// done runs last: after the cleanup below has removed the temporary.
	defer s.begin(tmp)()
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = f.Close()
			if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("blob put %s: cleanup (left to the startup sweep): %w", key, rerr))
			}
		}
	}()

	src := newSource(ctx, r)
	// Written with O_DIRECT where the filesystem takes it (fsguard.DirectWriter), else written
	// back as it streams, so the fsync below has little left either way.
	w := &fsguard.DirectWriter{F: f, After: fsguard.DirectAfter}
	_, cerr := io.Copy(w, src)
	cerr = errors.Join(cerr, w.Finish())
	if err := src.failure(key); err != nil {
		return Info{}, err
	}
	if cerr != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, cerr)
	}
	if err := f.Sync(); err != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	sum, err := src.check(key, fi.Size(), want)
	if err != nil {
		return Info{}, err
	}
	if err := f.Close(); err != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	if err := ctxError(ctx, "blob put "+key); err != nil {
		return Info{}, err
	}
	final := s.path(key)
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	committed = true
	if err := s.syncDirs(filepath.Dir(final)); err != nil {
		// Not durable: take it back rather than publish something a crash could lose.
		_ = os.Remove(final)
		return Info{}, fmt.Errorf("blob put %s: %w", key, err)
	}
	return Info{Key: key, Size: fi.Size(), SHA256: sum, ModTime: fi.ModTime()}, nil
}

// syncDirs fsyncs dir and each parent up to the store's root, so new directories are durable too.
func (s *dirStore) syncDirs(dir string) error {
	for {
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return err
		}
		if dir == s.dir || !strings.HasPrefix(dir, s.dir+string(filepath.Separator)) {
			return nil
		}
		dir = filepath.Dir(dir)
	}
}

func (s *dirStore) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	fi, err := os.Lstat(s.path(key))
	if err != nil {
		return Info{}, s.notFound(key, err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, errorf(CodeNotFound, nil, "blob %s", key)
	}
	return Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (s *dirStore) notFound(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return errorf(CodeNotFound, nil, "blob %s", key)
	}
	return fmt.Errorf("blob %s: %w", key, err)
}

func (s *dirStore) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if _, err := s.Stat(ctx, key); err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, Info{}, s.notFound(key, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, Info{}, errorf(CodeNotFound, err, "blob %s", key)
	}
	return f, Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (s *dirStore) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	p := s.path(key)
	fi, err := os.Lstat(p)
	if err != nil {
		if IsNotFound(s.notFound(key, err)) {
			return nil
		}
		return fmt.Errorf("blob delete %s: %w", key, err)
	}
	if fi.IsDir() {
		return nil // no object by that name, only deeper keys
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob delete %s: %w", key, err)
	}
	return nil
}

func (s *dirStore) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	// Start the walk at the deepest directory the prefix names.
	start := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
	}
	var out []Info
	root := filepath.Join(s.dir, filepath.FromSlash(start))
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil // gone meanwhile, or the prefix names a file's child
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if key == tmpDir || (key != "." && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) || ValidKey(key) != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("blob list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// SweepTemporaries removes files in DIR/.tmp last modified more than olderThan ago, but not the
// live ones (live is given DIR/.tmp/NAME, the path Put gave its tracker).
func (s *dirStore) SweepTemporaries(ctx context.Context, olderThan time.Duration, live func(key string) bool) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	dir := filepath.Join(s.dir, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("blob sweep: %w", err)
	}
	n := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil || fi.ModTime().After(cutoff) || isLive(live, p) {
			continue
		}
		if e.IsDir() {
			err = os.RemoveAll(p)
		} else {
			err = os.Remove(p)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("blob sweep: %w", err)
		}
		n++
	}
	return n, nil
}
