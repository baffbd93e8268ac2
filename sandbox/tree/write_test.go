package tree

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// makeSource builds a host tree with the things a workspace holds: modes,
// nanosecond mtimes, nested and empty directories, relative, absolute and
// dangling symlinks, and a .git directory.
func makeSource(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	removable(t, src)
	files := map[string]os.FileMode{
		"README.md":            0o644,
		"bin/run.sh":           0o755,
		"secrets/key":          0o600,
		"secrets/ro.txt":       0o444,
		"deep/a/b/c/d.txt":     0o640,
		".git/HEAD":            0o644,
		".git/config":          0o644,
		".git/objects/ab/cdef": 0o444,
	}
	for name, mode := range files {
		p := filepath.Join(src, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("contents of "+name), mode))
		must(t, os.Chmod(p, mode))
	}
	must(t, os.MkdirAll(filepath.Join(src, "empty"), 0o700))
	must(t, os.MkdirAll(filepath.Join(src, ".git/refs/heads"), 0o755))
	must(t, os.Symlink("../README.md", filepath.Join(src, "bin/readme")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(src, "abs")))
	must(t, os.Symlink("missing/target", filepath.Join(src, "dangling")))
	must(t, os.Symlink("deep/a", filepath.Join(src, "dirlink")))
	must(t, os.Chmod(filepath.Join(src, "deep/a"), 0o750))
	must(t, os.Chmod(filepath.Join(src, "secrets"), 0o711))
	must(t, os.Chmod(filepath.Join(src, "deep/a/b"), 0o555)) // read-only, not top-level
	// Set times deepest first: touching a child changes its parent.
	mt := time.Date(2019, 7, 8, 9, 10, 11, 123456789, time.UTC)
	var paths []string
	filepath.WalkDir(src, func(p string, _ os.DirEntry, _ error) error { paths = append(paths, p); return nil })
	for i := len(paths) - 1; i > 0; i-- {
		mt = mt.Add(time.Second + 7)
		ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return src
}

func TestRoundTrip(t *testing.T) {
	src := makeSource(t)
	want := snapshot(t, src, true)
	resolvers(t, func(t *testing.T, res fsguard.Resolver) {
		for _, compress := range []bool{false, true} {
			var buf bytes.Buffer
			must(t, Write(context.Background(), &buf, src, WriteOptions{Zstd: compress}))
			if compress != bytes.HasPrefix(buf.Bytes(), zstdMagic) {
				t.Fatalf("zstd=%v but stream starts %x", compress, buf.Bytes()[:4])
			}
			dst := filepath.Join(t.TempDir(), "ws")
			removable(t, dst)
			must(t, os.Mkdir(dst, 0o755))
			root, err := fsguard.Open(dst, fsguard.WithResolver(res))
			if err != nil && res == fsguard.ResolverOpenat2 {
				t.Skip(err)
			}
			must(t, err)
			stats, err := Extract(context.Background(), root, &buf, ExtractOptions{})
			root.Close()
			must(t, err)
			if stats.Files != 8 || stats.Symlinks != 4 || stats.Dirs != 12 {
				t.Errorf("stats %+v", stats)
			}
			got := snapshot(t, dst, true)
			if d := diff(want, got); d != "" {
				t.Fatalf("zstd=%v: round trip differs:\n%s", compress, d)
			}
		}
	})
}

func TestWriteIsDeterministic(t *testing.T) {
	src := makeSource(t)
	var a, b bytes.Buffer
	must(t, Write(context.Background(), &a, src, WriteOptions{}))
	must(t, Write(context.Background(), &b, src, WriteOptions{}))
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two writes of the same tree differ")
	}
}

func TestWriteRefusesSpecialFiles(t *testing.T) {
	src := makeSource(t)
	sock := filepath.Join(src, ".git", "fsmonitor.ipc")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	must(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))

	err = Write(context.Background(), &bytes.Buffer{}, src, WriteOptions{})
	wantCode(t, err, fsguard.CodeInvalidArgument)

	var buf bytes.Buffer
	must(t, Write(context.Background(), &buf, src, WriteOptions{SkipSpecial: true}))
	dst := t.TempDir()
	removable(t, dst)
	root, err := fsguard.Open(dst)
	must(t, err)
	defer root.Close()
	_, err = Extract(context.Background(), root, &buf, ExtractOptions{})
	must(t, err)
	for _, name := range []string{".git/fsmonitor.ipc", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Fatalf("%s was archived: %v", name, err)
		}
	}
}

func TestWriteSourceValidation(t *testing.T) {
	src := makeSource(t)
	err := Write(context.Background(), &bytes.Buffer{}, filepath.Join(src, "README.md"), WriteOptions{})
	wantCode(t, err, fsguard.CodeNotDirectory)
	if err := Write(context.Background(), &bytes.Buffer{}, filepath.Join(src, "nope"), WriteOptions{}); err == nil {
		t.Fatal("missing source accepted")
	}
	// The source argument may itself be a symlink to a directory.
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(src, link))
	var a, b bytes.Buffer
	must(t, Write(context.Background(), &a, src, WriteOptions{}))
	must(t, Write(context.Background(), &b, link, WriteOptions{}))
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("source through a symlink archived differently")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Write(ctx, &bytes.Buffer{}, src, WriteOptions{}); err == nil {
		t.Fatal("cancelled write succeeded")
	}
}
