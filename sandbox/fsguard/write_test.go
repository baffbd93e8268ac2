package fsguard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// failingReader yields n bytes and then fails, like a connection dropped
// half-way through a body.
type failingReader struct{ n int }

var errDropped = errors.New("connection dropped")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errDropped
	}
	m := min(len(p), r.n)
	for i := range p[:m] {
		p[i] = 'x'
	}
	r.n -= m
	return m, nil
}

// cancellingReader cancels its context after the first read.
type cancellingReader struct {
	cancel context.CancelFunc
	reads  int
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	r.reads++
	if r.reads == 2 {
		r.cancel()
	}
	return copy(p, bytes.Repeat([]byte("y"), len(p))), nil
}

func assertDirEntries(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s holds %v, want %v", dir, got, want)
	}
}

func TestWriteFileLeavesNothingOnFailure(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		ctx := context.Background()
		must(t, f.root.MkdirAll("w", 0o755))
		dir := filepath.Join(f.dir, "w")

		_, err := f.root.WriteFile(ctx, "w/half", &failingReader{n: 3 << 20}, 0o644, WriteOptions{})
		if !errors.Is(err, errDropped) {
			t.Fatalf("want reader error, got %v", err)
		}
		assertDirEntries(t, dir)

		cctx, cancel := context.WithCancel(ctx)
		_, err = f.root.WriteFile(cctx, "w/cancelled", &cancellingReader{cancel: cancel}, 0o644, WriteOptions{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
		assertDirEntries(t, dir)

		errMismatch := errors.New("sha256 mismatch")
		_, err = f.root.WriteFile(ctx, "w/unverified", strings.NewReader("data"), 0o644, WriteOptions{
			Verify: func(WriteResult) error { return errMismatch },
		})
		if !errors.Is(err, errMismatch) {
			t.Fatalf("want verify error, got %v", err)
		}
		assertDirEntries(t, dir)

		// A failed replace keeps the old contents whole.
		must(t, f.root.WriteFileString("w/keep", "old"))
		_, err = f.root.WriteFile(ctx, "w/keep", &failingReader{n: 100}, 0o644, WriteOptions{Replace: true})
		if err == nil {
			t.Fatal("want error")
		}
		assertDirEntries(t, dir, "keep")
		b, _ := os.ReadFile(filepath.Join(dir, "keep"))
		if string(b) != "old" {
			t.Fatalf("keep = %q", b)
		}
	})
}

func TestWriteFileNoReplace(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		ctx := context.Background()
		_, err := f.root.WriteFile(ctx, "a/b/c.txt", strings.NewReader("new"), 0o644, WriteOptions{})
		wantCode(t, err, CodeExists)
		if !errors.Is(err, os.ErrExist) {
			t.Fatalf("errors.Is(ErrExist) false for %v", err)
		}
		b, _ := os.ReadFile(filepath.Join(f.dir, "a/b/c.txt"))
		if string(b) != "inside" {
			t.Fatalf("overwritten without Replace: %q", b)
		}
		_, err = f.root.WriteFile(ctx, "a/b", strings.NewReader("new"), 0o644, WriteOptions{Replace: true})
		wantCode(t, err, CodeExists)
		_, err = f.root.WriteFile(ctx, "a/b/c.txt", strings.NewReader("new"), 0o644, WriteOptions{Replace: true})
		must(t, err)
		b, _ = os.ReadFile(filepath.Join(f.dir, "a/b/c.txt"))
		if string(b) != "new" {
			t.Fatalf("Replace did not replace: %q", b)
		}
		assertDirEntries(t, filepath.Join(f.dir, "a/b"), "c.txt")
		_, err = f.root.WriteFile(ctx, "a/"+TempPrefix+"x", strings.NewReader("n"), 0o644, WriteOptions{})
		wantCode(t, err, CodeInvalidArgument)
		_, err = f.root.WriteFile(ctx, ".", strings.NewReader("n"), 0o644, WriteOptions{})
		wantCode(t, err, CodeInvalidArgument)
	})
}

// TestRenameNoReplaceRace shows the rename, not the early check, decides:
// a destination created after the check still wins.
func TestRenameNoReplaceRace(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		_, err := f.root.WriteFile(context.Background(), "late", strings.NewReader("mine"), 0o644, WriteOptions{
			Verify: func(WriteResult) error {
				return os.WriteFile(filepath.Join(f.dir, "late"), []byte("theirs"), 0o644)
			},
		})
		wantCode(t, err, CodeExists)
		b, _ := os.ReadFile(filepath.Join(f.dir, "late"))
		if string(b) != "theirs" {
			t.Fatalf("late = %q", b)
		}
		ents, _ := os.ReadDir(f.dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), TempPrefix) {
				t.Fatalf("temp file left: %s", e.Name())
			}
		}
	})
}

func TestWriteFileResult(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		data := bytes.Repeat([]byte("tether"), 100000)
		sum := sha256.Sum256(data)
		mt := time.Date(2020, 5, 6, 7, 8, 9, 123456789, time.UTC)
		var verified WriteResult
		got, err := f.root.WriteFile(context.Background(), "a/out.bin", bytes.NewReader(data), 0o751|os.ModeSetuid, WriteOptions{
			MTime:  mt,
			Verify: func(r WriteResult) error { verified = r; return nil },
		})
		must(t, err)
		want := WriteResult{Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		if got != want || verified != want {
			t.Fatalf("result %+v, verified %+v, want %+v", got, verified, want)
		}
		fi, err := os.Lstat(filepath.Join(f.dir, "a/out.bin"))
		must(t, err)
		// Exact mode despite the umask, setuid included.
		if fi.Mode() != 0o751|os.ModeSetuid || !fi.ModTime().Equal(mt) || fi.Size() != int64(len(data)) {
			t.Fatalf("mode %v mtime %v size %d", fi.Mode(), fi.ModTime(), fi.Size())
		}
		rf, err := f.root.Open("a/out.bin")
		must(t, err)
		back, err := io.ReadAll(rf)
		rf.Close()
		must(t, err)
		if !bytes.Equal(back, data) {
			t.Fatal("contents differ")
		}
	})
}
