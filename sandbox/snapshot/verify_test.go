package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyMatchesCapture: a real capture verifies, with the digests runner/snapshot.go
// summarize records beside a receipt and the entries Capture archived, in order.
func TestVerifyMatchesCapture(t *testing.T) {
	needTool(t, "git")
	src := sampleTree(t)
	mkfifo(t, filepath.Join(src, "pipe")) // skipped
	runGit(t, src, "init", "-q", "-b", "main")
	runGit(t, src, "add", "README.md")
	runGit(t, src, "commit", "-q", "-m", "one")
	data, m := capture(t, src)

	var seen []Entry
	v, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{OnEntry: func(e Entry) error {
		seen = append(seen, e)
		return nil
	}})
	must(t, err)
	entries, err := json.Marshal(m.Entries)
	must(t, err)
	tree := sha256.Sum256(entries)
	if v.TreeSHA256 != hex.EncodeToString(tree[:]) {
		t.Fatalf("tree %s, summarize's %x", v.TreeSHA256, tree)
	}
	if v.ManifestSHA256 != m.SHA256 || v.ManifestSize != m.JSONSize {
		t.Fatalf("manifest %s/%d, Capture's %s/%d", v.ManifestSHA256, v.ManifestSize, m.SHA256, m.JSONSize)
	}
	if v.Totals != m.Totals || v.Skipped != len(m.Skipped) || v.Skipped == 0 {
		t.Fatalf("totals %+v skipped %d, manifest %+v skipped %d", v.Totals, v.Skipped, m.Totals, len(m.Skipped))
	}
	if v.WorkspaceID != "ws-1" || v.Epoch != 3 || v.ToolVersion != "test" || !v.CreatedAt.Equal(m.CreatedAt) || v.GitError != m.GitError {
		t.Fatalf("verified %+v, manifest %+v", v, m)
	}
	git, err := json.Marshal(m.Git)
	must(t, err)
	if m.Git == nil || !bytes.Equal(v.Git, git) {
		t.Fatalf("git %s, summarize's %s", v.Git, git)
	}
	if len(seen) != len(m.Entries) {
		t.Fatalf("OnEntry saw %d entries, the manifest lists %d", len(seen), len(m.Entries))
	}
	for i := range seen {
		if d := entryDiff(&m.Entries[i], &seen[i]); d != "" {
			t.Fatalf("OnEntry %d: %s", i, d)
		}
	}
}

// archiveWithManifest archives ents, then js as the manifest.
func archiveWithManifest(t testing.TB, ents []hent, js string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range append(ents, hent{name: ManifestName, body: js, typ: tar.TypeReg, mode: 0o644}) {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, ModTime: hTime, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		must(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(e.body))
		must(t, err)
	}
	must(t, tw.Close())
	return zstdBytes(t, buf.Bytes())
}

// manifestJSON is the consistent manifest of ents, edited by replacing old with new in its JSON.
func manifestJSON(t testing.TB, ents []hent, old, new string) string {
	js, err := json.Marshal(consistentManifest(ents))
	must(t, err)
	if old != "" && !strings.Contains(string(js), old) {
		t.Fatalf("manifest has no %q", old)
	}
	return strings.Replace(string(js), old, new, 1)
}

type verifyCase struct {
	name string
	data func(t testing.TB) []byte
	code string
	opts VerifyOptions
}

func verifyCases() []verifyCase {
	good := []hent{hdir("a"), hfile("a/b", "bbbb"), hlink("a/l", "b"), hfile("a-c", "cc")}
	with := func(es ...hent) []hent { return append(append([]hent{}, good...), es...) }
	arch := func(ents []hent, mutate func(*Manifest), extra ...hent) func(testing.TB) []byte {
		return func(t testing.TB) []byte { return buildArchive(t, ents, mutate, extra...) }
	}
	edited := func(ents []hent, old, new string) func(testing.TB) []byte {
		return func(t testing.TB) []byte { return archiveWithManifest(t, ents, manifestJSON(t, ents, old, new)) }
	}
	otherSum := sha256.Sum256([]byte("BBBB"))
	big := strings.Repeat("x", maxManifestValue+1)
	return []verifyCase{
		{"content changed, manifest not", arch(good, func(m *Manifest) { m.Entries[1].SHA256 = hex.EncodeToString(otherSum[:]) }), CodeCorrupt, VerifyOptions{}},
		{"manifest entry mode changed", arch(good, func(m *Manifest) { m.Entries[3].Mode = 0o600 }), CodeCorrupt, VerifyOptions{}},
		{"manifest entry mtime changed", arch(good, func(m *Manifest) { m.Entries[0].MTime = m.Entries[0].MTime.Add(1) }), CodeCorrupt, VerifyOptions{}},
		{"manifest entry path changed", arch(good, func(m *Manifest) { m.Entries[3].Path = "a-d" }), CodeCorrupt, VerifyOptions{}},
		{"extra archive entry", arch(with(hfile("z", "z")), func(m *Manifest) {
			m.Entries = m.Entries[:len(m.Entries)-1]
			m.Totals = totals(m.Entries)
		}), CodeCorrupt, VerifyOptions{}},
		{"missing archive entry", arch(good, func(m *Manifest) {
			m.Entries = append(m.Entries, Entry{Path: "z", Type: TypeDir, MTime: hTime})
			m.Totals = totals(m.Entries)
		}), CodeCorrupt, VerifyOptions{}},
		{"entries swapped in both", arch([]hent{hfile("b", "1"), hfile("a", "2")}, nil), CodeCorrupt, VerifyOptions{}},
		{"full-path order, not tree order", arch([]hent{hdir("a"), hfile("a-c", "1"), hfile("a/b", "2")}, nil), CodeCorrupt, VerifyOptions{}},
		{"back into a finished directory", arch(with(hfile("a/z", "z")), nil), CodeCorrupt, VerifyOptions{}},
		{"duplicate", arch(with(hfile("a-c", "again")), nil), CodeCorrupt, VerifyOptions{}},
		{"duplicate directory", arch([]hent{hdir("a"), hfile("a/f", "1"), hdir("a")}, nil), CodeCorrupt, VerifyOptions{}},
		{"entry under a symlink", arch([]hent{hlink("l", "/tmp"), hfile("l/pwned", "x")}, nil), CodeSymlinkRefused, VerifyOptions{}},
		{"dir under a symlink", arch([]hent{hlink("l", ".."), hdir("l/sub")}, nil), CodeSymlinkRefused, VerifyOptions{}},
		{"entry under a file", arch([]hent{hfile("f", "1"), hfile("f/g", "2")}, nil), CodeCorrupt, VerifyOptions{}},
		{"missing parent", arch([]hent{hfile("nodir/f", "x")}, nil), CodeCorrupt, VerifyOptions{}},
		{"manifest not last", arch(good, nil, hfile("zzz", "x")), CodeCorrupt, VerifyOptions{}},
		{"no manifest", arch(good, func(m *Manifest) { m.Version = -1 }), CodeCorrupt, VerifyOptions{}},
		{"manifest version", arch(good, func(m *Manifest) { m.Version = 99 }), CodeUnsupported, VerifyOptions{}},
		{"manifest without version", edited(good, `"version":1,`, ``), CodeUnsupported, VerifyOptions{}},
		{"manifest totals", arch(good, func(m *Manifest) { m.Totals.Files++ }), CodeCorrupt, VerifyOptions{}},
		{"manifest key twice", edited(good, `"version":1,`, `"version":1,"version":1,`), CodeCorrupt, VerifyOptions{}},
		{"entries twice", edited(good, `"skipped":`, `"entries":[],"skipped":`), CodeCorrupt, VerifyOptions{}},
		{"manifest not JSON", edited(good, `{"version"`, `{version`), CodeCorrupt, VerifyOptions{}},
		{"data after the manifest's JSON", func(t testing.TB) []byte {
			return archiveWithManifest(t, good, manifestJSON(t, good, "", "")+" {}")
		}, CodeCorrupt, VerifyOptions{}},
		{"entries not an array", edited(good, `"entries":[`, `"entries":{"x":[`), CodeCorrupt, VerifyOptions{}},
		{"git not a git state", edited(good, `"totals":`, `"git":"HEAD","totals":`), CodeCorrupt, VerifyOptions{}},
		{"trailing garbage", func(t testing.TB) []byte { return append(buildArchive(t, good, nil), "junk"...) }, CodeCorrupt, VerifyOptions{}},
		{"too many entries", arch(good, nil), CodeTooLarge, VerifyOptions{MaxEntries: 3}},
		{"too many bytes", arch(good, nil), CodeTooLarge, VerifyOptions{MaxBytes: 5}},
		{"manifest too large", arch(good, nil), CodeTooLarge, VerifyOptions{MaxManifestBytes: 100}},
		{"manifest value too large", edited(good, `"workspace_id":"w"`, `"workspace_id":"`+big+`"`), CodeTooLarge, VerifyOptions{}},
		{"unknown value too large", edited(good, `"workspace_id":"w"`, `"workspace_id":"w","padding":["`+big+`"]`), CodeTooLarge, VerifyOptions{}},
	}
}

func TestVerifyRefusesTampering(t *testing.T) {
	held := 0
	cases := verifyCases()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(context.Background(), bytes.NewReader(tc.data(t)), tc.opts)
			wantCode(t, err, tc.code)
			held++
		})
	}
	// The same archives, without the fault, verify: each case tests what it names.
	good := []hent{hdir("a"), hfile("a/b", "bbbb"), hlink("a/l", "b"), hfile("a-c", "cc")}
	for _, data := range [][]byte{
		buildArchive(t, good, nil),
		archiveWithManifest(t, good, manifestJSON(t, good, `"workspace_id":"w"`, `"workspace_id":"w","future":{"a":[1,{"b":null}]}`)),
		archiveWithManifest(t, good, manifestJSON(t, good, `"mtime":"2023-11-14T22:13:20Z"`, `"mtime":"2023-11-14T23:13:20+01:00"`)),
	} {
		if _, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{MaxEntries: 4, MaxBytes: 6, MaxManifestBytes: 4 << 10}); err != nil {
			t.Fatalf("a sound archive: %v", err)
		}
	}
	t.Logf("verify-tamper: %d tampered archives tried, %d refused with their code", len(cases), held)
}

// TestVerifyRefusesHostileArchives: whatever Restore refuses, Verify refuses too, with the same
// code or, where an entry is also out of tree order, corrupt.
func TestVerifyRefusesHostileArchives(t *testing.T) {
	held := 0
	cases := hostileCases()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := VerifyOptions{MaxEntries: tc.opts.MaxEntries, MaxBytes: tc.opts.MaxBytes}
			_, err := Verify(context.Background(), bytes.NewReader(tc.data(t)), opts)
			var e *Error
			if !errors.As(err, &e) || (e.Code != tc.code && e.Code != CodeCorrupt) {
				t.Fatalf("want %s (or corrupt), got %v", tc.code, err)
			}
			held++
		})
	}
	t.Logf("verify-hostile: %d hostile archives tried, %d refused", len(cases), held)
}

func TestVerifyOnEntryErrorStops(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	data := buildArchive(t, []hent{hdir("a"), hfile("a/b", "b"), hfile("c", "c")}, nil)
	_, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{OnEntry: func(e Entry) error {
		if n++; e.Path == "a/b" {
			if e.SHA256 == "" {
				t.Error("OnEntry saw a file without its SHA-256")
			}
			return stop
		}
		return nil
	}})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("err %v after %d entries", err, n)
	}
}
