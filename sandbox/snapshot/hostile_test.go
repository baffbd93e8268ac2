package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// hent is one member of a hand-built archive.
type hent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func hfile(name, body string) hent {
	return hent{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func hdir(name string) hent { return hent{name: name + "/", typ: tar.TypeDir, mode: 0o755} }
func hlink(name, target string) hent {
	return hent{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}

var hTime = time.Unix(1700000000, 0).UTC()

// consistentManifest describes ents as Capture would.
func consistentManifest(ents []hent) *Manifest {
	m := &Manifest{Version: FormatVersion, WorkspaceID: "w", CreatedAt: hTime, Entries: []Entry{}, Skipped: []Skipped{}}
	for _, e := range ents {
		en := Entry{Path: strings.TrimSuffix(e.name, "/"), Mode: uint32(e.mode), MTime: hTime}
		switch e.typ {
		case tar.TypeReg:
			sum := sha256.Sum256([]byte(e.body))
			en.Type, en.Size, en.SHA256 = TypeFile, int64(len(e.body)), hex.EncodeToString(sum[:])
		case tar.TypeDir:
			en.Type = TypeDir
		case tar.TypeSymlink:
			en.Type, en.LinkTarget = TypeSymlink, e.link
		default:
			en.Type = "other"
		}
		m.Entries = append(m.Entries, en)
	}
	m.Totals = totals(m.Entries)
	return m
}

// buildTar writes ents, then the manifest (after mutate, when given)
// unless noManifest, then extra members after it.
func buildArchive(t testing.TB, ents []hent, mutate func(*Manifest), extra ...hent) []byte {
	t.Helper()
	m := consistentManifest(ents)
	if mutate != nil {
		mutate(m)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(e hent) {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, ModTime: hTime, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		must(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(e.body))
		must(t, err)
	}
	for _, e := range ents {
		add(e)
	}
	if m.Version != -1 { // -1: leave the manifest out
		js, err := json.Marshal(m)
		must(t, err)
		add(hent{name: ManifestName, body: string(js), typ: tar.TypeReg, mode: 0o644})
	}
	for _, e := range extra {
		add(e)
	}
	must(t, tw.Close())
	return zstdBytes(t, buf.Bytes())
}

func zstdBytes(t testing.TB, b []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	must(t, err)
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// zstdBomb is a frame whose header declares a window of 2^windowLog
// bytes, followed by a small raw block.
func zstdBomb(windowLog int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte((windowLog - 10) << 3)}
	payload := []byte("tiny")
	bh := uint32(1) | uint32(len(payload))<<3 // last block, raw
	return append(append(b, byte(bh), byte(bh>>8), byte(bh>>16)), payload...)
}

// zstdFCSBomb is a single-segment frame declaring 1 TiB of content, whose
// window is therefore that size.
func zstdFCSBomb() []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // FCS 8 bytes, single segment
	b = append(b, 0, 0, 0, 0, 0, 1, 0, 0)     // 1 << 40, little endian
	bh := uint32(1) | uint32(4)<<3
	return append(append(b, byte(bh), byte(bh>>8), byte(bh>>16)), "tiny"...)
}

type hostileCase struct {
	name string
	data func(t testing.TB) []byte
	code string
	opts RestoreOptions
}

func hostileCases() []hostileCase {
	good := []hent{hdir("ok"), hfile("ok/a.txt", "aaaa"), hlink("ok/l", "a.txt")}
	with := func(es ...hent) []hent { return append(append([]hent{}, good...), es...) }
	arch := func(ents []hent, mutate func(*Manifest), extra ...hent) func(testing.TB) []byte {
		return func(t testing.TB) []byte { return buildArchive(t, ents, mutate, extra...) }
	}
	raw := func(b []byte) func(testing.TB) []byte { return func(testing.TB) []byte { return b } }
	long := strings.Repeat("x", 256)
	return []hostileCase{
		{"tar slip", arch(with(hfile("../evil", "x")), nil), CodePathEscape, RestoreOptions{}},
		{"nested dotdot", arch(with(hfile("ok/../../evil", "x")), nil), CodePathEscape, RestoreOptions{}},
		{"absolute", arch(with(hfile("/tmp/evil", "x")), nil), CodePathEscape, RestoreOptions{}},
		{"link then write", arch(with(hlink("l", "/tmp"), hfile("l/pwned", "x")), nil), CodeSymlinkRefused, RestoreOptions{}},
		{"escaping link then write", arch(with(hlink("l", "../../outside"), hfile("l/pwned", "x")), nil), CodeSymlinkRefused, RestoreOptions{}},
		{"link then dir", arch(with(hlink("l", ".."), hdir("l/sub")), nil), CodeSymlinkRefused, RestoreOptions{}},
		{"duplicate file", arch(with(hfile("d", "1"), hfile("d", "2")), nil), CodeCorrupt, RestoreOptions{}},
		{"file then dir", arch(with(hfile("d", "1"), hdir("d")), nil), CodeCorrupt, RestoreOptions{}},
		{"hard link", arch(with(hent{name: "h", link: "ok/a.txt", typ: tar.TypeLink, mode: 0o644}), nil), CodeCorrupt, RestoreOptions{}},
		{"hard link outside", arch(with(hent{name: "h", link: "/etc/passwd", typ: tar.TypeLink, mode: 0o644}), nil), CodeCorrupt, RestoreOptions{}},
		{"char device", arch(with(hent{name: "null", typ: tar.TypeChar, mode: 0o666}), nil), CodeCorrupt, RestoreOptions{}},
		{"fifo", arch(with(hent{name: "p", typ: tar.TypeFifo, mode: 0o644}), nil), CodeCorrupt, RestoreOptions{}},
		{"over-long name", arch(with(hfile(long, "x")), nil), CodeCorrupt, RestoreOptions{}},
		{"manifest's name at the root, as a directory", arch(with(hdir(ManifestName)), nil), CodeCorrupt, RestoreOptions{}},
		{"missing parent", arch(with(hfile("nodir/f", "x")), nil), CodeCorrupt, RestoreOptions{}},
		{"file under file", arch(with(hfile("f", "1"), hfile("f/g", "2")), nil), CodeCorrupt, RestoreOptions{}},
		{"not canonical", arch(with(hfile("./x", "1")), nil), CodeCorrupt, RestoreOptions{}},
		{"mode with type bits", arch(with(hent{name: "m", typ: tar.TypeReg, mode: 0o100644}), nil), CodeCorrupt, RestoreOptions{}},
		{"entry not in manifest", arch(good, nil, hfile("extra", "x")), CodeCorrupt, RestoreOptions{}},
		{"unlisted entry", arch(with(hfile("extra", "x")), func(m *Manifest) {
			m.Entries = m.Entries[:len(m.Entries)-1]
			m.Totals = totals(m.Entries)
		}), CodeCorrupt, RestoreOptions{}},
		{"different sha", arch(good, func(m *Manifest) {
			m.Entries[1].SHA256 = strings.Repeat("0", 64)
		}), CodeCorrupt, RestoreOptions{}},
		{"different mode", arch(good, func(m *Manifest) { m.Entries[1].Mode = 0o755 }), CodeCorrupt, RestoreOptions{}},
		{"different link", arch(good, func(m *Manifest) { m.Entries[2].LinkTarget = "/etc" }), CodeCorrupt, RestoreOptions{}},
		{"different totals", arch(good, func(m *Manifest) { m.Totals.Bytes++ }), CodeCorrupt, RestoreOptions{}},
		{"manifest lists more", arch(good, func(m *Manifest) {
			m.Entries = append(m.Entries, Entry{Path: "zzz", Type: TypeDir, MTime: hTime})
			m.Totals = totals(m.Entries)
		}), CodeCorrupt, RestoreOptions{}},
		{"no manifest", arch(good, func(m *Manifest) { m.Version = -1 }), CodeCorrupt, RestoreOptions{}},
		{"manifest not last", arch(good, nil, hfile("zzz", "x")), CodeCorrupt, RestoreOptions{}},
		{"manifest version", arch(good, func(m *Manifest) { m.Version = 99 }), CodeUnsupported, RestoreOptions{}},
		{"truncated", func(t testing.TB) []byte {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			must(t, tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 20, Mode: 0o644}))
			tw.Write(make([]byte, 1000))
			return zstdBytes(t, buf.Bytes())
		}, CodeCorrupt, RestoreOptions{}},
		{"cut at entry boundary", func(t testing.TB) []byte {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			must(t, tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}))
			tw.Flush()
			return zstdBytes(t, buf.Bytes())
		}, CodeCorrupt, RestoreOptions{}},
		{"zstd window bomb", raw(zstdBomb(31)), CodeCorrupt, RestoreOptions{}},
		{"zstd content-size bomb", raw(zstdFCSBomb()), CodeCorrupt, RestoreOptions{}},
		{"garbage after frame", func(t testing.TB) []byte {
			return append(buildArchive(t, good, nil), "trailing garbage"...)
		}, CodeCorrupt, RestoreOptions{}},
		{"too many entries", arch(good, nil), CodeTooLarge, RestoreOptions{MaxEntries: 2}},
		{"too many bytes", arch(good, nil), CodeTooLarge, RestoreOptions{MaxBytes: 3}},
		{"not an archive", raw([]byte("hello, this is not a tar file at all, just text, long enough....")), CodeCorrupt, RestoreOptions{}},
	}
}

// hostileEnv is a root with content beside an outside directory.
type hostileEnv struct{ base, root, outside string }

func newHostileEnv(t testing.TB, empty bool) *hostileEnv {
	base := t.TempDir()
	e := &hostileEnv{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must(t, os.MkdirAll(e.root, 0o755))
	writeFile(t, filepath.Join(e.outside, "precious"), "keep", 0o644)
	if !empty {
		writeFile(t, filepath.Join(e.root, "existing.txt"), "mine", 0o644)
		must(t, os.Symlink("../outside", filepath.Join(e.root, "out")))
	}
	return e
}

func TestRestoreRefusesHostileArchives(t *testing.T) {
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data(t)
			for _, target := range []string{"restored", "."} {
				e := newHostileEnv(t, target == ".")
				before := noDirTimes(describe(t, e.base, true, nil))
				opts := tc.opts
				opts.Dir = target
				_, err := Restore(context.Background(), openRoot(t, e.root), bytes.NewReader(data), opts)
				wantCode(t, err, tc.code)
				if testing.Verbose() && target == "." {
					t.Logf("%v", err)
				}
				if d := diffMaps(before, noDirTimes(describe(t, e.base, true, nil))); d != "" {
					t.Fatalf("restore into %q changed the tree:\n%s", target, d)
				}
				if _, err := ReadManifest(context.Background(), bytes.NewReader(data)); err == nil && tc.opts == (RestoreOptions{}) {
					t.Fatalf("ReadManifest accepted the archive")
				}
			}
		})
	}
}

// TestRestoreAcceptsBuiltArchive: the builder above makes archives that
// restore when nothing is wrong with them, so the refusals are meaningful.
func TestRestoreAcceptsBuiltArchive(t *testing.T) {
	ents := []hent{hdir("ok"), hfile("ok/a.txt", "aaaa"), hlink("ok/l", "a.txt"), hlink("abs", "/etc/passwd")}
	e := newHostileEnv(t, false)
	m, err := Restore(context.Background(), openRoot(t, e.root), bytes.NewReader(buildArchive(t, ents, nil)), RestoreOptions{Dir: "restored", MaxEntries: 4, MaxBytes: 4})
	must(t, err)
	if m.Totals.Entries != 4 {
		t.Fatalf("totals %+v", m.Totals)
	}
	b, err := os.ReadFile(filepath.Join(e.root, "restored/ok/a.txt"))
	if err != nil || string(b) != "aaaa" {
		t.Fatalf("restored file: %q %v", b, err)
	}
}

// noDirTimes drops directory mtimes: creating and removing the staging
// directory necessarily updates its parent's.
func noDirTimes(m map[string]string) map[string]string {
	for k, v := range m {
		if strings.HasPrefix(v, "d") {
			m[k] = v[:strings.Index(v, " mtime=")]
		}
	}
	return m
}
