package fsguard

import (
	"os"
	"path/filepath"
	"testing"
)

// fixture is a root directory beside an "outside" directory that no
// operation may ever reach, with symlinks in the root that point at it.
type fixture struct {
	base, dir, outside string
	root               *Root
}

func resolvers(t *testing.T, fn func(t *testing.T, res Resolver)) {
	t.Helper()
	for _, res := range []Resolver{ResolverOpenat2, ResolverWalk} {
		t.Run(res.String(), func(t *testing.T) { fn(t, res) })
	}
}

func newFixture(t *testing.T, res Resolver) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{base: base, dir: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.dir, f.outside, filepath.Join(f.dir, "a", "b")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(f.outside, "file"), []byte("outside"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.dir, "a", "b", "c.txt"), []byte("inside"), 0o644))
	must(t, os.Symlink(f.outside, filepath.Join(f.dir, "link")))          // absolute
	must(t, os.Symlink("../outside", filepath.Join(f.dir, "rel")))        // relative, escaping
	must(t, os.Symlink("..", filepath.Join(f.dir, "up")))                 // to the parent
	must(t, os.Symlink("a/b", filepath.Join(f.dir, "inner")))             // stays inside, still refused
	must(t, os.Symlink("/proc/self/root", filepath.Join(f.dir, "magic"))) // magic link chain
	root, err := Open(f.dir, WithResolver(res))
	if res == ResolverOpenat2 && err != nil {
		t.Skipf("openat2 unavailable: %v", err)
	}
	must(t, err)
	if root.Resolver() != res {
		t.Fatalf("resolver = %v, want %v", root.Resolver(), res)
	}
	t.Cleanup(func() { root.Close() })
	f.root = root
	return f
}

// assertOutsideUntouched fails if anything but the original file exists in
// the outside directory or beside the root.
func (f *fixture) assertOutsideUntouched(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(f.outside)
	must(t, err)
	if len(ents) != 1 || ents[0].Name() != "file" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("outside directory changed: %v", names)
	}
	b, err := os.ReadFile(filepath.Join(f.outside, "file"))
	must(t, err)
	if string(b) != "outside" {
		t.Fatalf("outside file rewritten: %q", b)
	}
	top, err := os.ReadDir(f.base)
	must(t, err)
	if len(top) != 2 {
		t.Fatalf("entries appeared beside the root: %v", top)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s error, got nil", code)
	}
	if got := CodeOf(err); got != code {
		t.Fatalf("want code %s, got %q (%v)", code, got, err)
	}
}
