package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/sandbox/fsguard"
	"golang.org/x/sys/unix"
)

// openRoot opens dir through the guard with the resolver res.
func openRoot(t *testing.T, dir string, res fsguard.Resolver) *fsguard.Root {
	t.Helper()
	root, err := fsguard.Open(dir, fsguard.WithResolver(res))
	if err != nil && res == fsguard.ResolverOpenat2 {
		t.Skip(err)
	}
	must(t, err)
	t.Cleanup(func() { root.Close() })
	return root
}

// TestExportRoundTrip: a tree sent in under a prefix (Write), exported back (Export), relayed
// (Relay) and extracted on "the host" under another name (Extract with Only) is the same tree:
// bytes, modes, mtimes, symlinks as links (one absolute, one dangling, one to a directory), the
// empty directory, read-only directories.
func TestExportRoundTrip(t *testing.T) {
	src := makeSource(t)
	want := snapshot(t, src, true)
	resolvers(t, func(t *testing.T, res fsguard.Resolver) {
		ws := filepath.Join(t.TempDir(), "ws")
		removable(t, ws)
		must(t, os.Mkdir(ws, 0o755))
		var in bytes.Buffer
		must(t, Write(context.Background(), &in, src, WriteOptions{Prefix: "proj"}))
		if _, err := Extract(context.Background(), openRoot(t, ws, res), &in, ExtractOptions{Only: "proj"}); err != nil {
			t.Fatal(err)
		}
		var out, relayed bytes.Buffer
		stats, err := Export(context.Background(), openRoot(t, ws, res), &out, "proj", ExportOptions{Name: "back"})
		must(t, err)
		if stats.Files != 8 || stats.Symlinks != 4 || stats.Dirs != 13 || stats.Skipped != 0 {
			t.Errorf("export stats %+v", stats)
		}
		rstats, err := Relay(context.Background(), &relayed, &out, RelayOptions{Top: "back"})
		must(t, err)
		if rstats.Files != stats.Files || rstats.Dirs != stats.Dirs || rstats.Symlinks != stats.Symlinks || rstats.Bytes != stats.Bytes {
			t.Errorf("relay counted %+v, export %+v", rstats, stats)
		}
		host := t.TempDir()
		removable(t, host)
		if _, err := Extract(context.Background(), openRoot(t, host, res), &relayed, ExtractOptions{Only: "back"}); err != nil {
			t.Fatal(err)
		}
		if d := diff(want, snapshot(t, filepath.Join(host, "back"), true)); d != "" {
			t.Fatalf("round trip differs:\n%s", d)
		}
	})
}

// TestExportOneEntry: a file and a symlink export as one entry under the name asked for; the
// symlink is never followed; the root needs a name.
func TestExportOneEntry(t *testing.T) {
	ws := t.TempDir()
	must(t, os.WriteFile(filepath.Join(ws, "f.txt"), []byte("hello"), 0o640))
	must(t, os.Symlink("/etc", filepath.Join(ws, "etc")))
	root := openRoot(t, ws, fsguard.ResolverAuto)
	for _, tc := range []struct{ path, name, wantName string }{{"f.txt", "", "f.txt"}, {"f.txt", "g", "g"}, {"etc", "", "etc"}} {
		var buf bytes.Buffer
		if _, err := Export(context.Background(), root, &buf, tc.path, ExportOptions{Name: tc.name}); err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(&buf)
		h, err := tr.Next()
		must(t, err)
		if h.Name != tc.wantName {
			t.Errorf("%s: entry %q, want %q", tc.path, h.Name, tc.wantName)
		}
		if tc.path == "etc" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc") {
			t.Errorf("symlink exported as %c -> %q", h.Typeflag, h.Linkname)
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Errorf("%s: more than one entry (%v)", tc.path, err)
		}
	}
	_, err := Export(context.Background(), root, io.Discard, ".", ExportOptions{})
	wantCode(t, err, fsguard.CodeInvalidArgument)
	_, err = Export(context.Background(), root, io.Discard, "f.txt", ExportOptions{Name: "a/b"})
	wantCode(t, err, fsguard.CodeInvalidArgument)
	_, err = Export(context.Background(), root, io.Discard, "etc/passwd", ExportOptions{})
	wantCode(t, err, fsguard.CodeSymlinkRefused)
}

// TestExportSkipsSpecialFiles: a fifo is counted and named, never opened.
func TestExportSkipsSpecialFiles(t *testing.T) {
	ws := t.TempDir()
	must(t, os.Mkdir(filepath.Join(ws, "d"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(ws, "d", "pipe"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "d", "z"), []byte("z"), 0o644))
	var buf bytes.Buffer
	stats, err := Export(context.Background(), openRoot(t, ws, fsguard.ResolverAuto), &buf, "d", ExportOptions{})
	must(t, err)
	if stats.Skipped != 1 || len(stats.SkippedNames) != 1 || stats.SkippedNames[0] != "d/pipe" || stats.Files != 1 {
		t.Fatalf("stats %+v", stats)
	}
}

// hugePAX is a file entry preceded by a 2 MiB PAX header, made by hand (archive/tar writes none
// over 1 MiB, and reads none either).
func hugePAX(t *testing.T) []byte {
	rec := "comment=" + strings.Repeat("x", 2<<20) + "\n"
	rec = fmt.Sprintf("%d %s", len(rec)+8, rec) // the length counts itself: 7 digits and a space
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: "pax", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(rec)), Format: tar.FormatUSTAR}))
	_, err := tw.Write([]byte(rec))
	must(t, err)
	must(t, tw.Flush())
	b := buf.Bytes()
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	rest := buildTar(t, dir("top/"), file("top/f", "x"))
	return append(b, rest...)
}

// TestHostileExportStreams: what a hostile runner could send as an export is refused by the
// controller's Relay and by the host's Extract (Only), and the host extraction publishes
// nothing: the destination directory and everything beside it stay as they were.
func TestHostileExportStreams(t *testing.T) {
	good := []entry{dir("top/"), file("top/a.txt", "aaaa")}
	long := strings.Repeat("d/", 2100) + "f"
	cases := []struct {
		name    string
		stream  []byte
		code    string // "" any error
		relayOK bool   // Relay passes it on (only the host's state can refuse it)
	}{
		{"dotdot", buildTar(t, append(good, file("top/../x", "x"))...), fsguard.CodePathEscape, false},
		{"leading dotdot", buildTar(t, append(good, file("../x", "x"))...), fsguard.CodePathEscape, false},
		{"absolute", buildTar(t, append(good, file("/tmp/x", "x"))...), fsguard.CodePathEscape, false},
		{"beside top", buildTar(t, append(good, file(".bashrc", "x"))...), fsguard.CodeInvalidArgument, false},
		{"top prefix", buildTar(t, append(good, file("topx/a", "x"))...), fsguard.CodeInvalidArgument, false},
		{"symlink then file through it", buildTar(t, append(good, symlink("top/l", "/tmp"), file("top/l/x", "x"))...), fsguard.CodeSymlinkRefused, true},
		{"symlink to outside then dir", buildTar(t, append(good, symlink("top/l", "../../outside"), dir("top/l/sub/"))...), fsguard.CodeSymlinkRefused, true},
		{"hard link", buildTar(t, append(good, entry{name: "top/h", link: "/etc/passwd", typ: tar.TypeLink})...), fsguard.CodeInvalidArgument, false},
		{"device", buildTar(t, append(good, entry{name: "top/null", typ: tar.TypeChar, mode: 0o666})...), fsguard.CodeInvalidArgument, false},
		{"reserved name", buildTar(t, append(good, file("top/"+StagePrefix+"x", "x"))...), fsguard.CodeInvalidArgument, false},
		{"long name", buildTar(t, append(good, file("top/"+long, "x"))...), fsguard.CodeInvalidPath, false},
		{"huge header", hugePAX(t), "", false},
		{"huge header after top", append(buildTar(t, good...)[:1536], hugePAX(t)...), "", false},
		{"no end marker", buildTar(t, good...)[:1536], "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var relayed bytes.Buffer
			_, err := Relay(context.Background(), &relayed, bytes.NewReader(tc.stream), RelayOptions{Top: "top"})
			switch {
			case tc.relayOK && err != nil:
				t.Fatalf("relay refused: %v", err)
			case !tc.relayOK && err == nil:
				t.Fatal("relay passed it on")
			case !tc.relayOK && tc.code != "":
				wantCode(t, err, tc.code)
			}
			if !tc.relayOK {
				// What was relayed before the refusal has no end marker: a receiver refuses it.
				e := newEnv(t, fsguard.ResolverAuto)
				if _, err := Extract(context.Background(), e.root, &relayed, ExtractOptions{Only: "top"}); err == nil {
					t.Fatal("the refused relay's output extracted")
				}
			}
			resolvers(t, func(t *testing.T, res fsguard.Resolver) {
				e := newEnv(t, res)
				before := snapshot(t, e.dir, true)
				_, err := Extract(context.Background(), e.root, bytes.NewReader(tc.stream), ExtractOptions{Only: "top"})
				if err == nil {
					t.Fatal("extracted")
				}
				if tc.code != "" {
					wantCode(t, err, tc.code)
				}
				if d := diff(before, snapshot(t, e.dir, true)); d != "" {
					t.Fatalf("destination changed:\n%s", d)
				}
				e.assertOutsideUntouched(t)
			})
		})
	}
}
