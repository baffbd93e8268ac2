package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// expectCLIError checks a failed CLI call: its exit status, and one `error: <code>: ` line.
func expectCLIError(t *testing.T, r result, code protocol.Code, what string) {
	t.Helper()
	if r.Code != code.ExitCode() || !strings.HasPrefix(r.Stderr, "error: "+string(code)+": ") || strings.Count(r.Stderr, "\n") != 1 {
		t.Fatalf("%s: want exit %d and `error: %s: ...`, got %+v", what, code.ExitCode(), code, r)
	}
}

func readHost(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Put and get through the CLI: small, empty and 64 MiB random files come back byte for byte,
// to stdout and with -o; stdin works as a source.
func TestFilesPutGetRoundTrip(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	local := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"small.txt", []byte("hello, workspace\n")},
		{"empty", nil},
		{"big/random.bin", randomBytes(t, 64<<20)},
	} {
		src := filepath.Join(local, strings.ReplaceAll(tc.name, "/", "_"))
		mustWrite(t, src, tc.data, 0o644)
		if strings.Contains(tc.name, "/") {
			c.mustCLI(t, "files", "mkdir", ws.ID, filepath.Dir(tc.name))
		}
		var res protocol.FsWriteResult
		if err := json.Unmarshal([]byte(c.mustCLI(t, "files", "put", ws.ID, src, tc.name, "--json")), &res); err != nil {
			t.Fatal(err)
		}
		want := sha256Hex(tc.data)
		if res.Path != tc.name || res.Bytes != int64(len(tc.data)) || res.SHA256 != want {
			t.Fatalf("put %s: %+v, want %d bytes sha256 %s", tc.name, res, len(tc.data), want)
		}
		if got := sha256Hex(readHost(t, filepath.Join(ws.Root, tc.name))); got != want {
			t.Fatalf("put %s: the workspace holds sha256 %s", tc.name, got)
		}
		if got := c.mustCLI(t, "files", "get", ws.ID, tc.name); sha256Hex([]byte(got)) != want {
			t.Fatalf("get %s to stdout: %d bytes, sha256 %s", tc.name, len(got), sha256Hex([]byte(got)))
		}
		dst := filepath.Join(local, "out", filepath.Base(tc.name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		c.mustCLI(t, "files", "get", ws.ID, tc.name, "-o", dst)
		if got := sha256Hex(readHost(t, dst)); got != want {
			t.Fatalf("get -o %s: sha256 %s", tc.name, got)
		}
	}
	// The plain output names the path, the byte count and the digest.
	src := filepath.Join(local, "plain.txt")
	mustWrite(t, src, []byte("plain\n"), 0o644)
	out := c.mustCLI(t, "files", "put", ws.ID, src, "plain.txt")
	if want := "plain.txt: 6 bytes, sha256 " + sha256Hex([]byte("plain\n")) + "\n"; out != want {
		t.Fatalf("put output %q, want %q", out, want)
	}
	// stdin as the source.
	r := c.cli(t, strings.NewReader("from stdin\n"), "files", "put", ws.ID, "-", "stdin.txt")
	if r.Code != 0 || string(readHost(t, filepath.Join(ws.Root, "stdin.txt"))) != "from stdin\n" {
		t.Fatalf("put from stdin: %+v", r)
	}

	// A failed get -o leaves neither the destination nor a temporary file, and keeps an
	// existing destination as it was.
	dst := filepath.Join(local, "out", "kept")
	mustWrite(t, dst, []byte("mine"), 0o644)
	expectCLIError(t, c.cli(t, nil, "files", "get", ws.ID, "missing", "-o", dst), protocol.CodeNotFound, "get -o of a missing file")
	expectCLIError(t, c.cli(t, nil, "files", "get", ws.ID, "big", "-o", dst), protocol.CodeInvalidArgument, "get -o of a directory")
	if string(readHost(t, dst)) != "mine" {
		t.Fatal("a failed get -o changed its destination")
	}
	expectCLIError(t, c.cli(t, nil, "files", "get", ws.ID, "missing", "-o", filepath.Join(local, "out", "new")), protocol.CodeNotFound, "get -o to a new file")
	ents, _ := os.ReadDir(filepath.Join(local, "out"))
	for _, e := range ents {
		if e.Name() != "kept" && e.Name() != "small.txt" && e.Name() != "empty" && e.Name() != "random.bin" {
			t.Errorf("get -o left %s behind", e.Name())
		}
	}
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, filepath.Join(local, "nope"), "x"), protocol.CodeNotFound, "put of a missing local file")
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, local, "x"), protocol.CodeInvalidArgument, "put of a local directory")
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, src), protocol.CodeInvalidArgument, "put without PATH")
}

// Existing files are kept unless --replace; --if-sha256 replaces only the expected content.
func TestFilesPutReplaceAndIfSHA256(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	local := t.TempDir()
	v1, v2, v3 := filepath.Join(local, "v1"), filepath.Join(local, "v2"), filepath.Join(local, "v3")
	mustWrite(t, v1, []byte("version one\n"), 0o644)
	mustWrite(t, v2, []byte("version two\n"), 0o644)
	mustWrite(t, v3, []byte("version three\n"), 0o644)
	target := filepath.Join(ws.Root, "f.txt")
	content := func() string { return string(readHost(t, target)) }

	c.mustCLI(t, "files", "put", ws.ID, v1, "f.txt")
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v2, "f.txt"), protocol.CodeExists, "put over an existing file")
	if content() != "version one\n" {
		t.Fatal("a refused put changed the file")
	}
	c.mustCLI(t, "files", "put", ws.ID, v2, "f.txt", "--replace")
	if content() != "version two\n" {
		t.Fatalf("--replace: %q", content())
	}
	wrong := sha256Hex([]byte("version one\n"))
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v3, "f.txt", "--if-sha256", wrong), protocol.CodeConflict, "--if-sha256 of stale content")
	if content() != "version two\n" {
		t.Fatal("a conflicting put changed the file")
	}
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v3, "absent.txt", "--if-sha256", wrong), protocol.CodeConflict, "--if-sha256 of a missing file")
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v3, "f.txt", "--if-sha256", "xyz"), protocol.CodeInvalidArgument, "malformed --if-sha256")
	c.mustCLI(t, "files", "put", ws.ID, v3, "f.txt", "--if-sha256", strings.ToUpper(sha256Hex([]byte("version two\n"))))
	if content() != "version three\n" {
		t.Fatalf("--if-sha256 with the right digest: %q", content())
	}

	// --mode sets the permission bits exactly; nonsense modes are usage errors.
	c.mustCLI(t, "files", "put", ws.ID, v1, "secret", "--mode", "0600")
	if fi, err := os.Stat(filepath.Join(ws.Root, "secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("--mode 0600: %v %v", fi.Mode(), err)
	}
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v1, "m", "--mode", "1777"), protocol.CodeInvalidArgument, "--mode beyond 0777")
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v1, "m", "--mode", "rw"), protocol.CodeInvalidArgument, "--mode rw")
	// The temporary-name space is reserved: nothing can be published under it, so a leftover
	// temporary file is never mistaken for a finished one.
	expectCLIError(t, c.cli(t, nil, "files", "put", ws.ID, v1, tempPrefix+"x"), protocol.CodeInvalidArgument, "put to a temporary name")
	if left := tempFilesUnder(t, ws.Root); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// 2,500 entries span several pages; ls follows the cursor and prints them all, sorted, as one
// JSON array (and one line each in the plain form).
func TestFilesLsPages(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	var want []string
	for i := 0; i < 2500; i++ {
		name := fmt.Sprintf("f-%05d-%x", (i*7919)%2500, i) // written out of order
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(ws.Root, name), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(want)
	var got []protocol.FileInfo
	out := c.mustCLI(t, "files", "ls", ws.ID, "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("ls --json is not one JSON array: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("ls --json: %d entries, want %d", len(got), len(want))
	}
	for i, e := range got {
		if e.Name != want[i] || e.Path != want[i] || e.Type != protocol.FileRegular || e.Size != 1 {
			t.Fatalf("entry %d: %+v, want %s", i, e, want[i])
		}
	}
	if lines := strings.Split(strings.TrimSuffix(c.mustCLI(t, "files", "ls", ws.ID, "."), "\n"), "\n"); len(lines) != 2500 || lines[0] != want[0] || lines[2499] != want[2499] {
		t.Fatalf("plain ls: %d lines", len(lines))
	}
}

// Symlinks are shown as links with their target, never followed, by ls and stat alike.
func TestFilesLsStatSymlinks(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secret"), []byte(strings.Repeat("s", 10000)), 0o600)
	mustWrite(t, filepath.Join(ws.Root, "d", "file"), []byte("inside"), 0o644)
	mustSymlink(t, filepath.Join(outside, "secret"), filepath.Join(ws.Root, "d", "to-secret"))
	mustSymlink(t, "file", filepath.Join(ws.Root, "d", "to-file"))

	out := c.mustCLI(t, "files", "ls", "-l", ws.ID, "d")
	for _, want := range []string{"file  ", "to-file -> file  ", "to-secret -> " + filepath.Join(outside, "secret") + "  symlink"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls -l lacks %q:\n%s", want, out)
		}
	}
	if out := c.mustCLI(t, "files", "ls", ws.ID); out != "d/\n" {
		t.Errorf("plain ls of the root: %q", out)
	}
	var fi protocol.FileInfo
	if err := json.Unmarshal([]byte(c.mustCLI(t, "files", "stat", ws.ID, "d/to-secret", "--json")), &fi); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(outside, "secret")
	if fi.Type != protocol.FileSymlink || fi.LinkTarget != target || fi.Size != int64(len(target)) {
		t.Fatalf("stat of a link followed it or lost its target: %+v", fi)
	}
	if out := c.mustCLI(t, "files", "stat", ws.ID, "d/to-file"); !strings.Contains(out, "Type:      symlink") || !strings.Contains(out, "Target:    file") {
		t.Fatalf("stat output:\n%s", out)
	}
	// Through the link, nothing is reachable.
	expectCLIError(t, c.cli(t, nil, "files", "get", ws.ID, "d/to-secret"), protocol.CodeSymlinkRefused, "get through a link")
	expectCLIError(t, c.cli(t, nil, "files", "ls", ws.ID, "d/to-file"), protocol.CodeSymlinkRefused, "ls of a link")
	expectCLIError(t, c.cli(t, nil, "files", "ls", ws.ID, "d/file"), protocol.CodeNotDirectory, "ls of a file")
	expectCLIError(t, c.cli(t, nil, "files", "stat", ws.ID, "nope"), protocol.CodeNotFound, "stat of nothing")
}

// mkdir, rm, mv and chmod through the CLI, including the refusals each one owes.
func TestFilesMkdirRmMvChmod(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	host := func(p string) string { return filepath.Join(ws.Root, p) }

	c.mustCLI(t, "files", "mkdir", ws.ID, "-p", "a/b/c")
	if fi, err := os.Stat(host("a/b/c")); err != nil || !fi.IsDir() {
		t.Fatalf("mkdir -p: %v", err)
	}
	c.mustCLI(t, "files", "mkdir", ws.ID, "-p", "a/b/c") // idempotent with -p
	c.mustCLI(t, "files", "mkdir", ws.ID, "a/single")
	expectCLIError(t, c.cli(t, nil, "files", "mkdir", ws.ID, "a/single"), protocol.CodeExists, "mkdir of an existing dir")
	expectCLIError(t, c.cli(t, nil, "files", "mkdir", ws.ID, "x/y"), protocol.CodeNotFound, "mkdir without its parent")

	// rm -r of a tree holding a link to an outside directory removes the link, not its target.
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "keep", "precious"), []byte("do not delete"), 0o644)
	mustSymlink(t, outside, host("a/b/c/escape"))
	mustSymlink(t, filepath.Join(outside, "keep", "precious"), host("a/b/file-link"))
	mustWrite(t, host("a/b/c/data"), []byte("data"), 0o644)
	before := snapTree(t, outside)
	expectCLIError(t, c.cli(t, nil, "files", "rm", ws.ID, "a/b"), protocol.CodeConflict, "rm of a non-empty directory")
	c.mustCLI(t, "files", "rm", ws.ID, "-r", "a/b")
	if _, err := os.Lstat(host("a/b")); !os.IsNotExist(err) {
		t.Fatalf("rm -r left a/b: %v", err)
	}
	if d := before.diff(snapTree(t, outside)); d != nil {
		t.Fatalf("rm -r reached outside the workspace: %v", d)
	}
	expectCLIError(t, c.cli(t, nil, "files", "rm", ws.ID, "a/b"), protocol.CodeNotFound, "rm of nothing")
	expectCLIError(t, c.cli(t, nil, "files", "rm", ws.ID, "-r", "a/b"), protocol.CodeNotFound, "rm -r of nothing")
	expectCLIError(t, c.cli(t, nil, "files", "rm", ws.ID, "."), protocol.CodeInvalidArgument, "rm of the root")
	mustWrite(t, host("lone"), []byte("x"), 0o644)
	c.mustCLI(t, "files", "rm", ws.ID, "lone")
	c.mustCLI(t, "files", "rm", ws.ID, "a/single")
	if _, err := os.Lstat(host("lone")); !os.IsNotExist(err) {
		t.Fatal("rm left the file")
	}

	// mv keeps an existing destination unless --replace.
	mustWrite(t, host("from"), []byte("from"), 0o644)
	mustWrite(t, host("to"), []byte("to"), 0o644)
	expectCLIError(t, c.cli(t, nil, "files", "mv", ws.ID, "from", "to"), protocol.CodeExists, "mv onto an existing file")
	if string(readHost(t, host("from"))) != "from" || string(readHost(t, host("to"))) != "to" {
		t.Fatal("a refused mv changed something")
	}
	c.mustCLI(t, "files", "mv", ws.ID, "from", "a/moved")
	c.mustCLI(t, "files", "mv", ws.ID, "a/moved", "to", "--replace")
	if _, err := os.Lstat(host("a/moved")); !os.IsNotExist(err) || string(readHost(t, host("to"))) != "from" {
		t.Fatalf("mv --replace: %v", err)
	}
	expectCLIError(t, c.cli(t, nil, "files", "mv", ws.ID, "nothing", "x"), protocol.CodeNotFound, "mv of nothing")

	// chmod sets exact bits on files and directories and refuses links.
	c.mustCLI(t, "files", "chmod", ws.ID, "0600", "to")
	c.mustCLI(t, "files", "chmod", ws.ID, "700", "a")
	for p, want := range map[string]os.FileMode{"to": 0o600, "a": 0o700} {
		if fi, err := os.Stat(host(p)); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("chmod %s: %v %v", p, fi.Mode(), err)
		}
	}
	mustSymlink(t, "to", host("link"))
	expectCLIError(t, c.cli(t, nil, "files", "chmod", ws.ID, "0777", "link"), protocol.CodeSymlinkRefused, "chmod of a link")
	if fi, _ := os.Stat(host("to")); fi.Mode().Perm() != 0o600 {
		t.Fatal("chmod followed a link")
	}
	expectCLIError(t, c.cli(t, nil, "files", "chmod", ws.ID, "u+x", "to"), protocol.CodeInvalidArgument, "symbolic chmod mode")
	expectCLIError(t, c.cli(t, nil, "files", "chmod", ws.ID, "0644", "nothing"), protocol.CodeNotFound, "chmod of nothing")
	// The alias works too.
	if out := c.mustCLI(t, "fs", "ls", ws.ID); out != "a/\nlink -> to\nto\n" {
		t.Fatalf("fs ls: %q", out)
	}
}
