package fsguard

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func writeT(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Publish renames within the root onto a new name, or over a file only while it holds the
// named bytes; a symlink or directory at the destination is never replaced or followed.
func TestPublish(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stage := func(name, data string) string {
		writeT(t, filepath.Join(dir, name), data)
		return name
	}
	if err := r.Publish(stage("s1", "new"), "a", PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(stage("s2", "again"), "a", PublishOptions{}); CodeOf(err) != CodeExists {
		t.Fatalf("publish onto an existing name: %v", err)
	}
	sum := func(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }
	if err := r.Publish("s2", "a", PublishOptions{IfSHA256: sum("other")}); CodeOf(err) != CodeConflict {
		t.Fatalf("publish over other bytes: %v", err)
	}
	if err := r.Publish("s2", "a", PublishOptions{IfSHA256: sum("new")}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "again" {
		t.Fatalf("a: %q", b)
	}
	writeT(t, filepath.Join(outside, "x"), "outside")
	os.Symlink(filepath.Join(outside, "x"), filepath.Join(dir, "link"))
	os.Symlink(outside, filepath.Join(dir, "dirlink"))
	stage("s3", "evil")
	if err := r.Publish("s3", "link", PublishOptions{IfSHA256: sum("outside")}); err == nil {
		t.Fatal("published over a symlink")
	}
	if err := r.Publish("s3", "dirlink/x", PublishOptions{}); err == nil {
		t.Fatal("published through a symlinked directory")
	}
	if err := r.Publish("s3", ".tether-tmp-x", PublishOptions{}); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("published to a reserved name: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "x")); string(b) != "outside" {
		t.Fatalf("the file outside changed: %q", b)
	}
}

// Adopt moves a file from outside the root in by one rename, with the same refusals.
func TestAdopt(t *testing.T) {
	dir, private, outside := t.TempDir(), t.TempDir(), t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	from := filepath.Join(private, "staged")
	writeT(t, from, "staged")
	writeT(t, filepath.Join(dir, "exists"), "old")
	if err := r.Adopt(from, "exists", false); CodeOf(err) != CodeExists {
		t.Fatalf("adopt onto an existing file: %v", err)
	}
	os.Symlink(filepath.Join(outside, "x"), filepath.Join(dir, "link"))
	if err := r.Adopt(from, "link", true); CodeOf(err) != CodeSymlinkRefused {
		t.Fatalf("adopt over a symlink: %v", err)
	}
	os.Symlink(outside, filepath.Join(dir, "dirlink"))
	if err := r.Adopt(from, "dirlink/x", false); err == nil {
		t.Fatal("adopted through a symlinked directory")
	}
	if _, err := os.Lstat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Fatalf("something appeared outside: %v", err)
	}
	if err := r.Adopt(from, "exists", true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "exists")); string(b) != "staged" {
		t.Fatalf("exists: %q", b)
	}
	if _, err := os.Lstat(from); !os.IsNotExist(err) {
		t.Fatalf("the staged file is still there: %v", err)
	}
}
