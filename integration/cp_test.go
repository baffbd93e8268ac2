package integration

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/protocol"
)

// describeCopy maps every entry under dir (relative slash paths, dir itself left out) to what a
// copy must keep: type, permission bits, mtime, a file's SHA-256, a link's target.
func describeCopy(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = "L " + target
		case fi.Mode().IsRegular():
			sum, err := fileSHA256(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = fmt.Sprintf("F %o %d %s", fi.Mode().Perm(), fi.ModTime().UnixNano(), sum)
		case fi.IsDir():
			out[filepath.ToSlash(rel)] = fmt.Sprintf("D %o %d", fi.Mode().Perm(), fi.ModTime().UnixNano())
		default:
			out[filepath.ToSlash(rel)] = "? " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("describe %s: %v", dir, err)
	}
	return out
}

func sameCopy(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, "missing "+p)
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %s, want %s", p, g, w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, "extra "+p)
		}
	}
	if len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("… %d more", len(diffs)-20))
		}
		t.Fatalf("%s differs:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// makeCopyTree writes a tree of files (n small files in nested directories), a big random file,
// symlinks (relative, absolute, dangling, to a directory), an empty directory and varied modes.
// Modification times are set so a copy that drops them shows.
func makeCopyTree(t *testing.T, dir string, n, big int) {
	t.Helper()
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("d%02d/s%03d/f%05d.txt", i%20, (i/20)%50, i))
		mode := fs.FileMode(0o644)
		switch i % 7 {
		case 1:
			mode = 0o755
		case 2:
			mode = 0o600
		case 3:
			mode = 0o444
		}
		mustWrite(t, p, []byte(fmt.Sprintf("file %d\n%s", i, strings.Repeat("x", i%300))), mode)
	}
	if big > 0 {
		bigRandomFile(t, filepath.Join(dir, "big.bin"), big)
	}
	mustSymlink(t, "d00/s000/f00000.txt", filepath.Join(dir, "link"))
	mustSymlink(t, "/etc/passwd", filepath.Join(dir, "abs-link"))
	mustSymlink(t, "no/such/target", filepath.Join(dir, "dangling"))
	mustSymlink(t, "d01", filepath.Join(dir, "dir-link"))
	if err := os.MkdirAll(filepath.Join(dir, "empty", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "d03"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Times last, deepest first: creating an entry changes its directory's mtime.
	var paths []string
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	at := time.Date(2020, 2, 3, 4, 5, 6, 789, time.UTC)
	for i := len(paths) - 1; i > 0; i-- {
		if fi, err := os.Lstat(paths[i]); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
			if err := os.Chtimes(paths[i], at, at.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tether cp moves a 20,000-file tree (nested directories, symlinks of every kind, an empty
// directory, modes, a 24 MiB file) into a workspace and back out exactly, both ways by the
// docker cp rules, and as tar streams on stdin and stdout; absolute paths inside the root work,
// others are refused with a hint; bad arguments are refused clearly.
func TestCpDirectoryRoundTrip(t *testing.T) {
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t)
	host := t.TempDir()
	src := filepath.Join(host, "src")
	makeCopyTree(t, src, 20000, 24<<20)
	want := describeCopy(t, src)

	// In, to a path that does not exist: it becomes the copy.
	out := c.mustCLI(t, "cp", src, ws.ID+":copy")
	if !strings.Contains(out, "copied 20001 files") {
		t.Errorf("cp in printed %q", out)
	}
	sameCopy(t, "the workspace's copy", want, describeCopy(t, filepath.Join(ws.Root, "copy")))

	// Into an existing directory: dir/NAME. Again: refused (exists), nothing merged or changed.
	c.mustCLI(t, "files", "mkdir", ws.ID, "into")
	c.mustCLI(t, "cp", src, ws.ID+":into")
	sameCopy(t, "the copy into a directory", want, describeCopy(t, filepath.Join(ws.Root, "into", "src")))
	before := describeCopy(t, filepath.Join(ws.Root, "into"))
	expectCLIError(t, c.cli(t, nil, "cp", src, ws.ID+":into"), protocol.CodeExists, "cp onto an existing copy")
	sameCopy(t, "the directory after a refused cp", before, describeCopy(t, filepath.Join(ws.Root, "into")))

	// Out, to a path that does not exist, then into an existing directory.
	back := filepath.Join(host, "back")
	c.mustCLI(t, "cp", ws.ID+":copy", back)
	sameCopy(t, "the copy back out", want, describeCopy(t, back))
	outDir := filepath.Join(host, "outdir")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.mustCLI(t, "cp", ws.ID+":copy", outDir)
	sameCopy(t, "the copy into a host directory", want, describeCopy(t, filepath.Join(outDir, "copy")))
	expectCLIError(t, c.cli(t, nil, "cp", ws.ID+":copy", outDir), protocol.CodeExists, "cp out onto an existing copy")
	if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
		t.Fatalf("a refused cp out left %d entries in the host directory (staging?)", len(ents))
	}

	// Tar streams: out on stdout, in from stdin.
	r := c.cli(t, nil, "cp", ws.ID+":copy", "-")
	if r.Code != 0 {
		t.Fatalf("cp to stdout: %+v", r.Stderr)
	}
	tarOut := []byte(r.Stdout)
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(tarOut))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the tar on stdout: %v", err)
		}
		names[strings.TrimSuffix(h.Name, "/")] = true
	}
	if !names["copy"] || !names["copy/big.bin"] || !names["copy/dangling"] || len(names) != len(want)+1 {
		t.Fatalf("the tar on stdout holds %d names, want %d under copy/", len(names), len(want)+1)
	}
	c.mustCLI(t, "files", "mkdir", ws.ID, "fromtar")
	if r := c.cli(t, bytes.NewReader(tarOut), "cp", "-", ws.ID+":fromtar"); r.Code != 0 {
		t.Fatalf("cp from stdin: %+v", r)
	}
	sameCopy(t, "the copy from a tar on stdin", want, describeCopy(t, filepath.Join(ws.Root, "fromtar", "copy")))

	// One file, by an absolute path inside the root, with --parents; back to a host file.
	one := filepath.Join(src, "d01", "s000", "f00001.txt")
	c.mustCLI(t, "cp", "--parents", one, ws.ID+":"+filepath.Join(ws.Root, "a", "b", "one.txt"))
	if got := describeCopy(t, filepath.Join(ws.Root, "a", "b")); got["one.txt"] == "" || got["one.txt"][:5] != "F 755" {
		t.Fatalf("one file: %v", got)
	}
	c.mustCLI(t, "cp", ws.ID+":a/b/one.txt", filepath.Join(host, "one.txt"))
	if !bytes.Equal(readHost(t, one), readHost(t, filepath.Join(host, "one.txt"))) {
		t.Fatal("one file came back different")
	}

	// Refusals.
	r = c.cli(t, nil, "cp", one, ws.ID+":/etc/x")
	expectCLIError(t, r, protocol.CodePathEscape, "an absolute path outside the root")
	if !strings.Contains(r.Stderr, "paths are relative to the workspace root ("+ws.Root+")") {
		t.Errorf("no hint: %s", r.Stderr)
	}
	expectCLIError(t, c.cli(t, nil, "cp", one, filepath.Join(host, "x")), protocol.CodeInvalidArgument, "no workspace side")
	expectCLIError(t, c.cli(t, nil, "cp", ws.ID+":a", ws.ID+":b"), protocol.CodeInvalidArgument, "both sides in workspaces")
	expectCLIError(t, c.cli(t, nil, "cp", one, "no-such-workspace:x"), protocol.CodeNotFound, "an unknown workspace")
	expectCLIError(t, c.cli(t, nil, "cp", one, ws.ID+":missing/parent/x"), protocol.CodeNotFound, "a missing parent without --parents")
	r = c.cli(t, nil, "files", "put", ws.ID, src, "x")
	expectCLIError(t, r, protocol.CodeInvalidArgument, "files put of a directory")
	if !strings.Contains(r.Stderr, "tether cp") {
		t.Errorf("files put of a directory does not point at cp: %s", r.Stderr)
	}
	r = c.cli(t, nil, "files", "get", ws.ID, "copy")
	expectCLIError(t, r, protocol.CodeInvalidArgument, "files get of a directory")
	if !strings.Contains(r.Stderr, "tether cp") {
		t.Errorf("files get of a directory does not point at cp: %s", r.Stderr)
	}
	// files put --parents and an absolute path in files commands.
	c.mustCLI(t, "files", "put", "--parents", ws.ID, one, "p/q/r.txt")
	c.mustCLI(t, "files", "stat", ws.ID, filepath.Join(ws.Root, "p", "q", "r.txt"))
	expectCLIError(t, c.cli(t, nil, "files", "stat", ws.ID, "/etc/passwd"), protocol.CodePathEscape, "files stat outside the root")
}

// A workspace in Docker: cp in and out of the container's /workspace, checked from inside the
// container (its listing) and on the host.
func TestDockerCp(t *testing.T) {
	engine := dockerEngine(t)
	c := startDockerController(t, engine)
	ws := c.createOn(t, "docker")
	host := t.TempDir()
	src := filepath.Join(host, "src")
	makeCopyTree(t, src, 300, 3<<20)
	want := describeCopy(t, src)
	c.mustCLI(t, "cp", src, ws.ID+":copy")
	// Inside the container: every file's mode and digest, every link's target.
	listing := c.mustCLI(t, "exec", ws.ID, "--", "sh", "-c", "cd copy && "+treeListing)
	for p, d := range want {
		var line string
		switch d[0] {
		case 'F':
			f := strings.Fields(d)
			line = fmt.Sprintf("F ./%s %s %s", p, f[1], f[3])
		case 'L':
			line = fmt.Sprintf("L ./%s -> %s", p, d[2:])
		case 'D':
			line = fmt.Sprintf("D ./%s %s", p, strings.Fields(d)[1])
		}
		if !strings.Contains(listing, line+"\n") {
			t.Fatalf("the container's copy lacks %q", line)
		}
	}
	back := filepath.Join(host, "back")
	c.mustCLI(t, "cp", ws.ID+":/workspace/copy", back)
	sameCopy(t, "the copy back from Docker", want, describeCopy(t, back))
}
