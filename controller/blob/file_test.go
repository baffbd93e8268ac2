package blob_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/blob"
	"github.com/tetherhq/tether/controller/blob/blobtest"
)

func dirOf(t *testing.T, s blob.Store) string {
	t.Helper()
	dir, ok := strings.CutPrefix(s.String(), "file://")
	if !ok {
		t.Fatalf("not a directory store: %s", s)
	}
	return dir
}

func TestDirStore(t *testing.T) {
	blobtest.Run(t,
		func(t *testing.T) blob.Store {
			s, err := blob.Open(context.Background(), "", filepath.Join(t.TempDir(), "blobs"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		blobtest.Leftovers(dirLeftovers), blobtest.Plant(dirPlant),
	)
}

// dirLeftovers lists the files in the store's .tmp/.
func dirLeftovers(t *testing.T, s blob.Store) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dirOf(t, s), ".tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, ".tmp/"+e.Name())
	}
	return out
}

// dirPlant leaves what a controller killed mid-Put leaves: a half-written temporary.
func dirPlant(t *testing.T, s blob.Store) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Join(dirOf(t, s), ".tmp"), "crashed-")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("half an archive")
	f.Close()
}

func TestDirStoreLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	s, err := blob.Open(context.Background(), "file://"+dir, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "file://"+dir {
		t.Fatalf("String() = %q", s)
	}
	if _, err := s.Put(context.Background(), "snapshots/ws1/s1.tar.zst", strings.NewReader("data"), ""); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		dir:                                 os.ModeDir | 0o700,
		filepath.Join(dir, ".tmp"):          os.ModeDir | 0o700,
		filepath.Join(dir, "snapshots/ws1"): os.ModeDir | 0o700,
		filepath.Join(dir, "snapshots/ws1/s1.tar.zst"): 0o600,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	// Files that are not valid keys (and symlinks) are not objects.
	if err := os.WriteFile(filepath.Join(dir, "bad name"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(context.Background(), "")
	if err != nil || len(list) != 1 || list[0].Key != "snapshots/ws1/s1.tar.zst" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, _, err := s.Get(context.Background(), "link"); blobtest.Code(err) != blob.CodeNotFound {
		t.Fatalf("Get of a symlink: %v; want not_found", err)
	}
}

// A key whose parent is an object fails cleanly and leaves no temporary.
func TestDirStoreKeyUnderObject(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "a", strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a/b", strings.NewReader("y"), ""); err == nil {
		t.Fatal("Put under an object succeeded")
	}
	if _, err := s.Stat(ctx, "a/b"); blobtest.Code(err) != blob.CodeNotFound {
		t.Fatalf("Stat a/b: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, ".tmp")); len(entries) != 0 {
		t.Fatalf("temporaries left: %v", entries)
	}
	if list, err := s.List(ctx, "a/"); err != nil || len(list) != 0 {
		t.Fatalf("List(a/) = %+v, %v", list, err)
	}
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{"", "file://" + dir, "file://localhost" + dir, dir} {
		s, err := blob.Open(ctx, u, dir)
		if err != nil || s.String() != "file://"+dir {
			t.Errorf("Open(%q) = %v, %v", u, s, err)
		}
	}
	for _, u := range []string{
		"file://host/x", "file:relative", "file:///x?y=1", "http://example.com/x", "rel/dir", "::",
		"s3://", "s3:///prefix", "s3://bucket?endpoint=127.0.0.1:1&bogus=1",
		"s3://bucket?part_size_mib=4", "s3://bucket?part_size_mib=x", "s3://bucket?max_retries=0",
		"s3://bucket?insecure=maybe", "s3://bucket/../x", "s3://user:secret@bucket",
	} {
		if _, err := blob.Open(ctx, u, dir); blobtest.Code(err) != blob.CodeInvalidArgument {
			t.Errorf("Open(%q): %v; want invalid_argument", u, err)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): error shows the secret: %v", u, err)
		}
	}
	if _, err := blob.Open(ctx, "", ""); blobtest.Code(err) != blob.CodeInvalidArgument {
		t.Errorf("Open with no URL and no default dir: %v", err)
	}
}
