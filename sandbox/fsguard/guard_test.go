package fsguard

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEscapingPathsRejected(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		ctx := context.Background()
		for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "../outside/file", "a/b/../../../outside/file"} {
			_, err := f.root.Open(p)
			wantCode(t, err, CodePathEscape)
			_, err = f.root.WriteFile(ctx, p, strings.NewReader("x"), 0o644, WriteOptions{Replace: true})
			wantCode(t, err, CodePathEscape)
			wantCode(t, f.root.MkdirAll(p, 0o755), CodePathEscape)
			_, err = f.root.Lstat(p)
			wantCode(t, err, CodePathEscape)
			wantCode(t, f.root.RemoveAll(p), CodePathEscape)
		}
		f.assertOutsideUntouched(t)
	})
}

func TestSymlinkComponentRefused(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		ctx := context.Background()
		for _, l := range []string{"link", "rel", "up", "inner", "magic"} {
			_, err := f.root.Open(l + "/file")
			wantCode(t, err, CodeSymlinkRefused)
			_, err = f.root.Open(l + "/outside/file")
			wantCode(t, err, CodeSymlinkRefused)
			_, err = f.root.WriteFile(ctx, l+"/new", strings.NewReader("pwned"), 0o644, WriteOptions{})
			wantCode(t, err, CodeSymlinkRefused)
			wantCode(t, f.root.MkdirAll(l+"/sub/deeper", 0o755), CodeSymlinkRefused)
			wantCode(t, f.root.Mkdir(l+"/sub", 0o755), CodeSymlinkRefused)
			wantCode(t, f.root.Symlink("x", l+"/planted"), CodeSymlinkRefused)
			wantCode(t, f.root.Remove(l+"/file"), CodeSymlinkRefused)
			wantCode(t, f.root.RemoveAll(l+"/file"), CodeSymlinkRefused)
			wantCode(t, f.root.Chmod(l+"/file", 0o777), CodeSymlinkRefused)
			wantCode(t, f.root.Chtimes(l+"/file", time.Time{}, time.Unix(1, 0)), CodeSymlinkRefused)
			_, err = f.root.ReadDir(l)
			wantCode(t, err, CodeSymlinkRefused)
			_, err = f.root.OpenDir(l)
			wantCode(t, err, CodeSymlinkRefused)
			_, err = f.root.Lstat(l + "/file")
			wantCode(t, err, CodeSymlinkRefused)
		}
		f.assertOutsideUntouched(t)
	})
}

func TestFinalSymlinkRefused(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		must(t, os.Symlink(filepath.Join(f.outside, "file"), filepath.Join(f.dir, "flink")))
		_, err := f.root.Open("flink")
		wantCode(t, err, CodeSymlinkRefused)
		for _, replace := range []bool{false, true} {
			_, err = f.root.WriteFile(context.Background(), "flink", strings.NewReader("pwned"), 0o644, WriteOptions{Replace: replace})
			wantCode(t, err, CodeSymlinkRefused)
		}
		wantCode(t, f.root.Chmod("flink", 0o777), CodeSymlinkRefused)
		// Listing and reading a link as a link is fine.
		fi, err := f.root.Lstat("flink")
		must(t, err)
		if fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("Lstat mode %v, want symlink", fi.Mode())
		}
		target, err := f.root.Readlink("flink")
		must(t, err)
		if target != filepath.Join(f.outside, "file") {
			t.Fatalf("Readlink = %q", target)
		}
		// Removing a link removes the link only.
		must(t, f.root.Remove("flink"))
		must(t, f.root.RemoveAll("link"))
		f.assertOutsideUntouched(t)
	})
}

func TestNotFoundAndNotDirectory(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		_, err := f.root.Open("nope/x")
		wantCode(t, err, CodeNotFound)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("errors.Is(%v, fs.ErrNotExist) = false", err)
		}
		_, err = f.root.Lstat("nope")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Lstat: %v", err)
		}
		_, err = f.root.Open("a/b/c.txt/x")
		wantCode(t, err, CodeNotDirectory)
		_, err = f.root.ReadDir("a/b/c.txt")
		wantCode(t, err, CodeNotDirectory)
		wantCode(t, f.root.MkdirAll("a/b/c.txt/d", 0o755), CodeNotDirectory)
	})
}

func TestOperations(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		r := f.root
		must(t, r.MkdirAll("x/y/z", 0o755))
		must(t, r.MkdirAll("x/y/z", 0o755)) // idempotent
		wantCode(t, r.Mkdir("x/y", 0o755), CodeExists)
		must(t, r.Symlink("../../a/b/c.txt", "x/y/l"))
		wantCode(t, r.Symlink("t", "x/y/l"), CodeExists)
		got, err := r.Readlink("x/y/l")
		must(t, err)
		if got != "../../a/b/c.txt" {
			t.Fatalf("Readlink = %q", got)
		}
		_, err = r.Readlink("a/b/c.txt")
		wantCode(t, err, CodeInvalidArgument)

		ents, err := r.ReadDir("x/y")
		must(t, err)
		if len(ents) != 2 || ents[0].Name() != "l" || ents[0].Type() != fs.ModeSymlink || ents[1].Name() != "z" || !ents[1].IsDir() {
			t.Fatalf("ReadDir = %v", ents)
		}

		file, err := r.Open("a/b/c.txt")
		must(t, err)
		b := make([]byte, 16)
		n, _ := file.Read(b)
		file.Close()
		if string(b[:n]) != "inside" {
			t.Fatalf("read %q", b[:n])
		}

		must(t, r.Chmod("a/b/c.txt", 0o604))
		must(t, r.Chmod("x/y", 0o711))
		must(t, r.Chmod(".", 0o750))
		for p, want := range map[string]fs.FileMode{"a/b/c.txt": 0o604, "x/y": 0o711, ".": 0o750} {
			fi, err := r.Lstat(p)
			must(t, err)
			if fi.Mode().Perm() != want {
				t.Fatalf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
			}
		}

		// Chtimes on a link sets the link's times, not its target's.
		mt := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
		before, err := os.Stat(filepath.Join(f.outside))
		must(t, err)
		must(t, r.Chtimes("link", time.Time{}, mt))
		fi, err := r.Lstat("link")
		must(t, err)
		if !fi.ModTime().Equal(mt) {
			t.Fatalf("link mtime %v, want %v", fi.ModTime(), mt)
		}
		after, err := os.Stat(filepath.Join(f.outside))
		must(t, err)
		if !after.ModTime().Equal(before.ModTime()) {
			t.Fatal("Chtimes on a link changed its target")
		}

		must(t, r.Rename("a/b/c.txt", "x/moved", RenameOptions{}))
		must(t, r.WriteFileString("a/b/c.txt", "again"))
		wantCode(t, r.Rename("a/b/c.txt", "x/moved", RenameOptions{}), CodeExists)
		must(t, r.Rename("a/b/c.txt", "x/moved", RenameOptions{Replace: true}))

		wantCode(t, r.Remove("x"), CodeExists) // not empty
		wantCode(t, r.Remove("."), CodeInvalidArgument)
		wantCode(t, r.RemoveAll("."), CodeInvalidArgument)
		must(t, r.RemoveAll("x"))
		must(t, r.RemoveAll("x")) // already gone
		if _, err := os.Lstat(filepath.Join(f.dir, "x")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("x still there: %v", err)
		}
		f.assertOutsideUntouched(t)
	})
}

// WriteFileString is a test shorthand.
func (r *Root) WriteFileString(rel, s string) error {
	_, err := r.WriteFile(context.Background(), rel, strings.NewReader(s), 0o644, WriteOptions{})
	return err
}

func TestOpenDirIsConfined(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		sub, err := f.root.OpenDir("a")
		must(t, err)
		defer sub.Close()
		if sub.Resolver() != res {
			t.Fatalf("sub resolver %v", sub.Resolver())
		}
		_, err = sub.Open("../link/file")
		wantCode(t, err, CodePathEscape)
		must(t, sub.Symlink("..", "esc"))
		_, err = sub.Open("esc/a/b/c.txt")
		wantCode(t, err, CodeSymlinkRefused)
		fi, err := sub.Lstat("b/c.txt")
		must(t, err)
		if fi.Size() != 6 {
			t.Fatalf("size %d", fi.Size())
		}
		must(t, sub.Close())
		_, err = sub.Lstat("b")
		if err == nil {
			t.Fatal("operation on a closed root succeeded")
		}
	})
}

func TestOpenRefusesSpecialFiles(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		must(t, syscall.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644))
		// Without O_NONBLOCK this open would hang for want of a writer.
		_, err := f.root.Open("fifo")
		wantCode(t, err, CodeInvalidArgument)
		_, err = f.root.Open("a")
		wantCode(t, err, CodeInvalidArgument)
	})
}

func TestRemoveAllUnreadableDirs(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		must(t, f.root.MkdirAll("t/ro/inner", 0o755))
		must(t, f.root.WriteFileString("t/ro/inner/f", "x"))
		must(t, f.root.Symlink(f.outside, "t/ro/out"))
		must(t, f.root.Chmod("t/ro/inner", 0o500))
		must(t, f.root.Chmod("t/ro", 0))
		must(t, f.root.RemoveAll("t"))
		if _, err := f.root.Lstat("t"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("t survived: %v", err)
		}
		f.assertOutsideUntouched(t)
	})
}

func TestOpenRootValidation(t *testing.T) {
	_, err := Open("relative/dir")
	wantCode(t, err, CodeInvalidArgument)
	_, err = Open(filepath.Join(t.TempDir(), "missing"))
	wantCode(t, err, CodeNotFound)
	r, err := Open(t.TempDir())
	must(t, err)
	must(t, r.Close())
	must(t, r.Close())
}
