package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

// TestExtractRefusesAndLeavesTargetUnchanged: each archive is refused with
// a typed error, and the target tree is exactly as before, with no staging
// or temporary leftovers, even when good entries came first.
func TestExtractRefusesAndLeavesTargetUnchanged(t *testing.T) {
	good := []entry{dir("new/"), file("new/a.txt", "aaaa"), symlink("new/l", "a.txt")}
	cases := []struct {
		name    string
		entries []entry
		code    string
	}{
		{"dotdot", []entry{file("../evil", "x")}, fsguard.CodePathEscape},
		{"nested dotdot", []entry{file("a/../../evil", "x")}, fsguard.CodePathEscape},
		{"absolute", []entry{file("/tmp/evil", "x")}, fsguard.CodePathEscape},
		{"through absolute symlink", []entry{symlink("l", "/"), file("l/pwned", "x")}, fsguard.CodeSymlinkRefused},
		{"through escaping symlink", []entry{symlink("l", "../outside"), file("l/pwned", "x")}, fsguard.CodeSymlinkRefused},
		{"through symlink dir entry", []entry{symlink("l", ".."), dir("l/sub/")}, fsguard.CodeSymlinkRefused},
		{"through symlink then link", []entry{symlink("l", "/tmp"), symlink("l/x", "y")}, fsguard.CodeSymlinkRefused},
		{"hard link", []entry{file("f", "x"), {name: "h", link: "f", typ: tar.TypeLink, mode: 0o644}}, fsguard.CodeInvalidArgument},
		{"hard link outside", []entry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink, mode: 0o644}}, fsguard.CodeInvalidArgument},
		{"char device", []entry{{name: "null", typ: tar.TypeChar, mode: 0o666}}, fsguard.CodeInvalidArgument},
		{"block device", []entry{{name: "sda", typ: tar.TypeBlock, mode: 0o666}}, fsguard.CodeInvalidArgument},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo, mode: 0o666}}, fsguard.CodeInvalidArgument},
		{"conflict", []entry{file("existing.txt", "theirs")}, fsguard.CodeExists},
		{"conflict with dir", []entry{dir("keep/")}, fsguard.CodeExists},
		{"duplicate file", []entry{file("d", "1"), file("d", "2")}, fsguard.CodeExists},
		{"file under file", []entry{file("f", "1"), file("f/g", "2")}, fsguard.CodeNotDirectory},
	}
	resolvers(t, func(t *testing.T, res fsguard.Resolver) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, res)
				before := snapshot(t, e.dir, true)
				data := buildTar(t, append(append([]entry{}, good...), tc.entries...)...)
				for _, stream := range [][]byte{data, zstdBytes(t, data)} {
					_, err := Extract(context.Background(), e.root, bytes.NewReader(stream), ExtractOptions{})
					wantCode(t, err, tc.code)
					if d := diff(before, snapshot(t, e.dir, true)); d != "" {
						t.Fatalf("target changed:\n%s", d)
					}
					e.assertOutsideUntouched(t)
				}
			})
		}
	})
}

func TestExtractBrokenStreams(t *testing.T) {
	data := buildTar(t, dir("d/"), file("d/big", strings.Repeat("x", 100000)), file("z", "last"))
	z := zstdBytes(t, data)
	cases := map[string][]byte{
		"cut in a file":  data[:2000],
		"cut in zstd":    z[:len(z)-5],
		"corrupt zstd":   append(append([]byte{}, z[:len(z)-8]...), 1, 2, 3, 4, 5, 6, 7, 8),
		"garbage header": bytes.Repeat([]byte{0x41}, 1024),
		"cut at entry":   data[:len(data)-1024],
		"one end block":  data[:len(data)-512],
		"cut zstd entry": zstdBytes(t, data[:len(data)-1024]),
		"empty":          nil,
	}
	resolvers(t, func(t *testing.T, res fsguard.Resolver) {
		for name, stream := range cases {
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, res)
				before := snapshot(t, e.dir, true)
				if _, err := Extract(context.Background(), e.root, bytes.NewReader(stream), ExtractOptions{}); err == nil {
					t.Fatal("broken stream accepted")
				}
				if d := diff(before, snapshot(t, e.dir, true)); d != "" {
					t.Fatalf("target changed:\n%s", d)
				}
			})
		}
		t.Run("limit", func(t *testing.T) {
			e := newEnv(t, res)
			_, err := Extract(context.Background(), e.root, bytes.NewReader(data), ExtractOptions{MaxBytes: 1000})
			wantCode(t, err, fsguard.CodeInvalidArgument)
		})
		t.Run("cancelled", func(t *testing.T) {
			e := newEnv(t, res)
			before := snapshot(t, e.dir, true)
			ctx, cancel := context.WithCancel(context.Background())
			r := io.MultiReader(bytes.NewReader(data[:1536]), readerFunc(func([]byte) (int, error) {
				cancel()
				return 0, context.Canceled
			}))
			if _, err := Extract(ctx, e.root, r, ExtractOptions{}); err == nil {
				t.Fatal("cancelled extract succeeded")
			}
			if d := diff(before, snapshot(t, e.dir, true)); d != "" {
				t.Fatalf("target changed:\n%s", d)
			}
		})
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestExtractIntoSubdirectory(t *testing.T) {
	resolvers(t, func(t *testing.T, res fsguard.Resolver) {
		e := newEnv(t, res)
		mt := time.Date(2011, 1, 2, 3, 4, 5, 600, time.UTC)
		data := buildTar(t,
			entry{name: "./", typ: tar.TypeDir, mode: 0o700},
			entry{name: "ro/", typ: tar.TypeDir, mode: 0o555, mtime: mt},
			entry{name: "ro/f", body: "hi", typ: tar.TypeReg, mode: 0o4755, mtime: mt},
			file("implicit/parent/g", "g"),
			symlink("ro/abs", "/etc/passwd"),
		)
		stats, err := Extract(context.Background(), e.root, bytes.NewReader(data), ExtractOptions{Dir: "keep/inner"})
		must(t, err)
		if stats != (Stats{Files: 2, Dirs: 1, Symlinks: 1, Bytes: 3}) {
			t.Fatalf("stats %+v", stats)
		}
		base := filepath.Join(e.dir, "keep/inner")
		fi, err := os.Lstat(filepath.Join(base, "ro"))
		must(t, err)
		if fi.Mode().Perm() != 0o555 || !fi.ModTime().Equal(mt) {
			t.Fatalf("ro: %v %v", fi.Mode(), fi.ModTime())
		}
		fi, err = os.Lstat(filepath.Join(base, "ro/f"))
		must(t, err)
		if fi.Mode() != 0o755 || !fi.ModTime().Equal(mt) { // setuid dropped
			t.Fatalf("ro/f: %v %v", fi.Mode(), fi.ModTime())
		}
		if l, _ := os.Readlink(filepath.Join(base, "ro/abs")); l != "/etc/passwd" {
			t.Fatalf("link target %q", l)
		}
		ents, _ := os.ReadDir(base)
		if len(ents) != 2 {
			t.Fatalf("leftovers in target: %v", ents)
		}
		// The target must exist, be a directory and not be reached by a link.
		_, err = Extract(context.Background(), e.root, bytes.NewReader(data), ExtractOptions{Dir: "nope"})
		wantCode(t, err, fsguard.CodeNotFound)
		_, err = Extract(context.Background(), e.root, bytes.NewReader(data), ExtractOptions{Dir: "out"})
		wantCode(t, err, fsguard.CodeSymlinkRefused)
		_, err = Extract(context.Background(), e.root, bytes.NewReader(data), ExtractOptions{Dir: "../outside"})
		wantCode(t, err, fsguard.CodePathEscape)
		e.assertOutsideUntouched(t)
	})
}
