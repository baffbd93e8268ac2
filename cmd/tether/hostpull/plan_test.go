package hostpull

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

func file(data string, mode uint32) api.PathState {
	return api.PathState{Type: "file", Mode: mode, Size: int64(len(data)), SHA256: fmt.Sprintf("%x", sha256.Sum256([]byte(data)))}
}

func dir(mode uint32) api.PathState { return api.PathState{Type: "dir", Mode: mode} }

// host makes a directory holding files (path → content; a trailing / makes a directory).
func host(t *testing.T, files map[string]string) (string, *fsguard.Root) {
	t.Helper()
	d := t.TempDir()
	for p, data := range files {
		full := filepath.Join(d, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := fsguard.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return d, root
}

// serve answers Files from contents, as the controller would: a tar of the paths asked for.
func serve(contents map[string]string) func(context.Context, []string) (io.ReadCloser, error) {
	return func(_ context.Context, paths []string) (io.ReadCloser, error) {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, p := range paths {
			data, ok := contents[p]
			if !ok {
				continue // a stream that lacks a file
			}
			tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))})
			tw.Write([]byte(data))
		}
		tw.Close()
		return io.NopCloser(&b), nil
	}
}

func listing(t *testing.T, d string) string {
	t.Helper()
	var out []string
	filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == d {
			return err
		}
		rel, _ := filepath.Rel(d, p)
		data := ""
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			data = string(b)
		}
		out = append(out, fmt.Sprintf("%s %v %q", rel, fi.Mode(), data))
		return nil
	})
	return strings.Join(out, "\n")
}

func TestPlanNamesAreChecked(t *testing.T) {
	_, root := host(t, nil)
	for _, p := range []string{".git/config", ".git", "../x", "/etc/passwd", "a/../b", "a//b", "a/.tether-tmp-x", ""} {
		_, err := MakePlan(root, []api.PathChange{{Path: p, Workspace: file("x", 0o644)}})
		if protocol.CodeOf(err) != protocol.CodeCorrupt {
			t.Errorf("a plan naming %q: %v, want corrupt", p, err)
		}
	}
}

// A file the workspace made a directory goes, its directory comes with what it holds; a
// directory the workspace removed stays (a conflict) while the host holds something else in it.
func TestPlanTypeChangesAndRemovedDirectories(t *testing.T) {
	d, root := host(t, map[string]string{"x": "base", "gone/a": "base", "gone/mine": "host's own", "emptied/a": "base"})
	changes := []api.PathChange{
		{Path: "emptied", Base: dir(0o755)},
		{Path: "emptied/a", Base: file("base", 0o644)},
		{Path: "gone", Base: dir(0o755)},
		{Path: "gone/a", Base: file("base", 0o644)},
		{Path: "x", Base: file("base", 0o644), Workspace: dir(0o750)},
		{Path: "x/y", Workspace: file("new", 0o600)},
	}
	p, err := MakePlan(root, changes)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range p.Items {
		got[it.Path] = it.Action
	}
	want := map[string]string{"emptied": ActApply, "emptied/a": ActApply, "gone": ActConflict, "gone/a": ActApply, "x": ActApply, "x/y": ActApply}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s (%v)", k, got[k], v, got)
		}
	}
	res, err := Apply(context.Background(), root, p, Options{RecoveryDir: filepath.Join(t.TempDir(), "rec"), Files: serve(map[string]string{"x/y": "new"})})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 5 || res.Conflicts != 1 {
		t.Errorf("result %+v", res)
	}
	want2 := strings.Join([]string{
		`gone drwxr-xr-x ""`, `gone/mine -rw-r--r-- "host's own"`, `x drwxr-x--- ""`, `x/y -rw------- "new"`,
	}, "\n")
	if got := listing(t, d); got != want2 {
		t.Errorf("host after apply:\n%s\nwant:\n%s", got, want2)
	}
}

// A host file edited after the plan looked is not overwritten; a transfer that fails writes
// nothing at all.
func TestApplyLeavesLateHostEditsAndFailedTransfers(t *testing.T) {
	d, root := host(t, map[string]string{"a": "base", "b": "base"})
	changes := []api.PathChange{
		{Path: "a", Base: file("base", 0o644), Workspace: file("ws-a", 0o644)},
		{Path: "b", Base: file("base", 0o644), Workspace: file("ws-b", 0o644)},
	}
	p, err := MakePlan(root, changes)
	if err != nil || p.Apply != 2 {
		t.Fatalf("plan %+v %v", p, err)
	}
	before := listing(t, d)
	if _, err := Apply(context.Background(), root, p, Options{Files: serve(map[string]string{"a": "ws-a"})}); protocol.CodeOf(err) != protocol.CodeCorrupt {
		t.Fatalf("a stream lacking a file: %v", err)
	}
	if got := listing(t, d); got != before {
		t.Fatalf("a failed transfer wrote:\n%s", got)
	}
	if err := os.WriteFile(filepath.Join(d, "b"), []byte("late host edit"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Apply(context.Background(), root, p, Options{Files: serve(map[string]string{"a": "ws-a", "b": "ws-b"})})
	if err != nil || res.Late != 1 || res.Conflicts != 1 || len(res.LatePaths) != 1 || res.LatePaths[0] != "b" || res.Applied != 1 {
		t.Fatalf("a late host edit: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(d, "b")); string(b) != "late host edit" {
		t.Errorf("the late edit was overwritten: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(d, "a")); string(b) != "ws-a" {
		t.Errorf("a: %q", b)
	}
}

// Bytes that are not the plan's digest are never published.
func TestApplyChecksDigests(t *testing.T) {
	d, root := host(t, map[string]string{"a": "base"})
	p, err := MakePlan(root, []api.PathChange{{Path: "a", Base: file("base", 0o644), Workspace: file("ws-a", 0o644)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(context.Background(), root, p, Options{Files: serve(map[string]string{"a": "evil"})}); err == nil {
		t.Fatal("bytes of another digest were applied")
	}
	if b, _ := os.ReadFile(filepath.Join(d, "a")); string(b) != "base" {
		t.Errorf("a: %q", b)
	}
}

// A file both sides changed, the workspace into a directory: the directory and everything in it
// are conflicts, not a refusal (the host did not swap a directory for a file under the pull).
func TestPlanConflictedDirectoryHoldsItsChildren(t *testing.T) {
	_, root := host(t, map[string]string{"x": "host edit"})
	p, err := MakePlan(root, []api.PathChange{
		{Path: "x", Base: file("base", 0o644), Workspace: dir(0o755)},
		{Path: "x/y", Workspace: dir(0o755)},
		{Path: "x/y/z", Workspace: file("new", 0o644)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Conflicts != 3 {
		t.Errorf("plan %+v", p)
	}
}

// Removals and type changes are compare-and-swap too: a host file edited, or a symlink
// repointed, after the plan looked is put back as it was and reported, never deleted.
func TestApplyRemovalsLeaveLateHostChanges(t *testing.T) {
	d, root := host(t, map[string]string{"f": "base", "g": "base"})
	if err := os.Symlink("old-target", filepath.Join(d, "l")); err != nil {
		t.Fatal(err)
	}
	p, err := MakePlan(root, []api.PathChange{
		{Path: "f", Base: file("base", 0o644)},
		{Path: "g", Base: file("base", 0o644), Workspace: api.PathState{Type: "symlink", LinkTarget: "f"}},
		{Path: "l", Base: api.PathState{Type: "symlink", LinkTarget: "old-target"}, Workspace: api.PathState{Type: "symlink", LinkTarget: "new-target"}},
	})
	if err != nil || p.Apply != 3 {
		t.Fatalf("plan %+v %v", p, err)
	}
	os.WriteFile(filepath.Join(d, "f"), []byte("saved by the editor"), 0o644)
	os.WriteFile(filepath.Join(d, "g"), []byte("saved by the editor"), 0o644)
	os.Remove(filepath.Join(d, "l"))
	os.Symlink("host-target", filepath.Join(d, "l"))
	res, err := Apply(context.Background(), root, p, Options{Files: serve(nil)})
	if err != nil || res.Late != 3 || res.Applied != 0 {
		t.Fatalf("late changes: %+v %v", res, err)
	}
	want := strings.Join([]string{`f -rw-r--r-- "saved by the editor"`, `g -rw-r--r-- "saved by the editor"`, `l Lrwxrwxrwx ""`}, "\n")
	if got := listing(t, d); got != want {
		t.Errorf("host:\n%s\nwant:\n%s", got, want)
	}
	if target, _ := os.Readlink(filepath.Join(d, "l")); target != "host-target" {
		t.Errorf("l points at %q", target)
	}
}

// A removed directory whose removed subdirectory still holds a host file is a conflict all the
// way up, and --theirs cannot take it: the pull finishes instead of failing on "not empty".
func TestApplyRemovedTreeHoldingHostFiles(t *testing.T) {
	for _, theirs := range []bool{false, true} {
		d, root := host(t, map[string]string{"d/sub/a": "base", "d/sub/hostnew": "mine", "x/hostfile": "mine"})
		p, err := MakePlan(root, []api.PathChange{
			{Path: "d", Base: dir(0o755)},
			{Path: "d/sub", Base: dir(0o755)},
			{Path: "d/sub/a", Base: file("base", 0o644)},
			{Path: "x", Base: dir(0o755), Workspace: file("ws", 0o644)},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			if it.Path != "d/sub/a" && (it.Action != ActConflict || !it.Stuck) {
				t.Errorf("theirs=%v: %s: %s stuck=%v", theirs, it.Path, it.Action, it.Stuck)
			}
		}
		res, err := Apply(context.Background(), root, p, Options{Theirs: theirs, RecoveryDir: filepath.Join(t.TempDir(), "rec"), Files: serve(map[string]string{"x": "ws"})})
		if err != nil || res.Applied != 1 {
			t.Fatalf("theirs=%v: %+v %v", theirs, res, err)
		}
		for _, f := range []string{"d/sub/hostnew", "x/hostfile"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err != nil || string(b) != "mine" {
				t.Errorf("theirs=%v: %s: %q %v", theirs, f, b, err)
			}
		}
	}
}
