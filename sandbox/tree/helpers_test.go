package tree

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

// entry describes one tar member for building test archives.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	mtime            time.Time
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}

func buildTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mt := e.mtime
		if mt.IsZero() {
			mt = time.Unix(1700000000, 0)
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, ModTime: mt, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstdBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// env is a root beside an outside directory, with a symlink in the root
// that points at it.
type env struct {
	base, dir, outside string
	root               *fsguard.Root
}

func newEnv(t testing.TB, res fsguard.Resolver) *env {
	t.Helper()
	base := t.TempDir()
	removable(t, base)
	e := &env{base: base, dir: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{e.outside, filepath.Join(e.dir, "keep", "inner")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(e.outside, "secret"), []byte("outside"), 0o600))
	must(t, os.WriteFile(filepath.Join(e.dir, "existing.txt"), []byte("mine"), 0o644))
	must(t, os.Symlink("../outside", filepath.Join(e.dir, "out")))
	root, err := fsguard.Open(e.dir, fsguard.WithResolver(res))
	if err != nil && res == fsguard.ResolverOpenat2 {
		t.Skipf("openat2 unavailable: %v", err)
	}
	must(t, err)
	t.Cleanup(func() { root.Close() })
	e.root = root
	return e
}

func resolvers(t *testing.T, fn func(t *testing.T, res fsguard.Resolver)) {
	for _, res := range []fsguard.Resolver{fsguard.ResolverOpenat2, fsguard.ResolverWalk} {
		t.Run(res.String(), func(t *testing.T) { fn(t, res) })
	}
}

// snapshot describes every entry under dir: type, permission bits, mtime,
// contents digest or link target. Directory mtimes are left out when
// withDirTimes is false, because extracting into a directory changes it.
func snapshot(t testing.TB, dir string, withDirTimes bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %x %d", sha256.Sum256(b), fi.ModTime().UnixNano())
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target + fmt.Sprintf(" %d", fi.ModTime().UnixNano())
		case fi.IsDir() && withDirTimes && rel != ".":
			desc += fmt.Sprintf(" %d", fi.ModTime().UnixNano())
		}
		out[rel] = desc
		return nil
	})
	must(t, err)
	return out
}

func diff(a, b map[string]string) string {
	var lines []string
	for k, v := range a {
		if b[k] != v {
			lines = append(lines, fmt.Sprintf("%s: %q != %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			lines = append(lines, fmt.Sprintf("%s: missing != %q", k, v))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (e *env) assertOutsideUntouched(t testing.TB) {
	t.Helper()
	ents, err := os.ReadDir(e.outside)
	must(t, err)
	if len(ents) != 1 || ents[0].Name() != "secret" {
		t.Fatalf("outside directory changed: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(e.outside, "secret")); string(b) != "outside" {
		t.Fatalf("outside file changed: %q", b)
	}
	if top, _ := os.ReadDir(e.base); len(top) != 2 {
		t.Fatalf("entries appeared beside the root: %v", top)
	}
}

// removable lets the TempDir cleanup, which runs after this one, delete
// read-only directories that tests extract when not running as root.
func removable(t testing.TB, dir string) {
	t.Cleanup(func() {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := fsguard.CodeOf(err); got != code {
		t.Fatalf("want code %s, got %q (%v)", code, got, err)
	}
}
