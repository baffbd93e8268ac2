package fsguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// IfSHA256 publishes only over the expected current content; anything else is a conflict that
// leaves the file as it was and no temporary file behind.
func TestWriteIfSHA256(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		target := filepath.Join(f.dir, "f")
		must(t, os.WriteFile(target, []byte("old"), 0o644))
		ctx := context.Background()

		_, err := f.root.WriteFile(ctx, "f", strings.NewReader("new"), 0o644, WriteOptions{IfSHA256: sum("something else")})
		wantCode(t, err, CodeConflict)
		if b, _ := os.ReadFile(target); string(b) != "old" {
			t.Fatalf("conflicting write changed the file to %q", b)
		}
		_, err = f.root.WriteFile(ctx, "missing", strings.NewReader("new"), 0o644, WriteOptions{IfSHA256: sum("old")})
		wantCode(t, err, CodeConflict)
		if _, err := os.Lstat(filepath.Join(f.dir, "missing")); err == nil {
			t.Fatal("a conditional write created a file that did not exist")
		}
		if _, err := f.root.WriteFile(ctx, "f", strings.NewReader("new"), 0o644, WriteOptions{IfSHA256: sum("old")}); err != nil {
			t.Fatalf("matching IfSHA256: %v", err)
		}
		if b, _ := os.ReadFile(target); string(b) != "new" {
			t.Fatalf("content %q after a matching conditional write", b)
		}
		noTemps(t, f.dir)
	})
}

// MaxBytes stops a write that is too large without publishing anything.
func TestWriteMaxBytes(t *testing.T) {
	resolvers(t, func(t *testing.T, res Resolver) {
		f := newFixture(t, res)
		ctx := context.Background()
		_, err := f.root.WriteFile(ctx, "big", strings.NewReader(strings.Repeat("x", 1025)), 0o644, WriteOptions{MaxBytes: 1024})
		wantCode(t, err, CodeTooLarge)
		if _, err := os.Lstat(filepath.Join(f.dir, "big")); err == nil {
			t.Fatal("an oversize write was published")
		}
		if _, err := f.root.WriteFile(ctx, "ok", strings.NewReader(strings.Repeat("x", 1024)), 0o644, WriteOptions{MaxBytes: 1024}); err != nil {
			t.Fatalf("a write at the limit: %v", err)
		}
		noTemps(t, f.dir)
	})
}

func noTemps(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), TempPrefix) {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}
