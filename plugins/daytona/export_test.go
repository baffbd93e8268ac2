package daytona_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/plugins/daytona/fake"
	"github.com/tetherhq/tether/plugins/provider"
	"github.com/tetherhq/tether/plugins/providertest"
)

// exportEnv is the real plugin binary against the fake, with one started
// allocation whose workspace holds a few files.
type exportEnv struct {
	c    *provider.Client
	f    *fake.Server
	id   string
	root string
}

func setupExport(t *testing.T) exportEnv {
	t.Helper()
	f := newFake(t)
	bin := providertest.Build(t, "github.com/tetherhq/tether/cmd/tether-provider-daytona", "tether-provider-daytona", "")
	c := providertest.OpenPlugin(t, bin)
	if err := c.Configure(ctx(t), provider.Config{StateDir: t.TempDir(), Options: map[string]string{"api_url": f.URL(), "api_key_env": keyEnv}}); err != nil {
		t.Fatal(err)
	}
	runner := filepath.Join(t.TempDir(), "tether-runner")
	if err := os.WriteFile(runner, []byte(runnerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	id := "ex1"
	a, err := c.Create(ctx(t), provider.CreateRequest{WorkspaceID: "ws-" + id, AllocationID: id, ControllerURL: "http://127.0.0.1:1",
		RunnerToken: "tok-ex", RunnerBinary: runner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy(ctx(t), id) })
	waitEnv(t, a.Root, "tok-ex")
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for name, data := range map[string][]byte{
		"a.txt": []byte("alpha\n"), "sub/b.txt": []byte("bravo\n"), "sub/deep/c.bin": big, "z.bin": big[:40000],
	} {
		p := filepath.Join(a.Root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return exportEnv{c: c, f: f, id: id, root: a.Root}
}

// tree reads every file under dir, by slash path.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func noTemps(t *testing.T, dir string) {
	t.Helper()
	for name := range tree(t, dir) {
		if strings.Contains(name, ".tether-export-") {
			t.Errorf("temp file left in dest: %s", name)
		}
	}
}

func equalTrees(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d files, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d bytes, want %d bytes (equal: %v)", k, len(got[k]), len(v), got[k] == v)
		}
	}
}

func writeAged(t *testing.T, p, data string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestExportFiles(t *testing.T) {
	e := setupExport(t)
	const max = 1 << 20

	t.Run("Copy", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "out")
		res, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
		if err != nil {
			t.Fatal(err)
		}
		want := tree(t, e.root)
		equalTrees(t, tree(t, dest), want)
		if res.Files != len(want) || len(res.Skipped) != 0 {
			t.Errorf("result %+v; want %d files, none skipped", res, len(want))
		}
		src, _ := os.Stat(filepath.Join(e.root, "z.bin"))
		dst, _ := os.Stat(filepath.Join(dest, "z.bin"))
		if !src.ModTime().Equal(dst.ModTime()) {
			t.Errorf("mtime %v, sandbox's %v", dst.ModTime(), src.ModTime())
		}
		// Again: everything is up to date, nothing is copied or skipped.
		res, err = e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
		if err != nil || res.Files != 0 || len(res.Skipped) != 0 {
			t.Fatalf("second export = %+v, %v; want nothing to do", res, err)
		}
		equalTrees(t, tree(t, dest), want)
	})

	t.Run("NewerHostFileKept", func(t *testing.T) {
		dest := t.TempDir()
		writeAged(t, filepath.Join(dest, "a.txt"), "host edit", time.Now().Add(time.Hour))
		writeAged(t, filepath.Join(dest, "sub", "b.txt"), "stale", time.Now().Add(-time.Hour))
		res, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Skipped, []string{"a.txt"}) {
			t.Errorf("skipped %v; want [a.txt]", res.Skipped)
		}
		want := tree(t, e.root)
		want["a.txt"] = "host edit"
		equalTrees(t, tree(t, dest), want)
	})

	t.Run("CutStreamThenRetry", func(t *testing.T) {
		dest := t.TempDir()
		old := time.Now().Add(-time.Hour)
		before := map[string]string{"a.txt": "old a", "sub/deep/c.bin": "old c", "z.bin": "old z"}
		for k, v := range before {
			writeAged(t, filepath.Join(dest, filepath.FromSlash(k)), v, old)
		}
		e.f.FailDownloadAfter(1000)
		_, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
		e.f.FailDownloadAfter(-1)
		if provider.ErrorCode(err) != provider.CodeUnavailable {
			t.Fatalf("export with a cut stream = %v; want %s", err, provider.CodeUnavailable)
		}
		noTemps(t, dest)
		want := tree(t, e.root)
		got := tree(t, dest)
		for k, v := range got {
			if v != want[k] && v != before[k] {
				t.Errorf("%s is partial after a cut stream (%d bytes)", k, len(v))
			}
		}
		if got["sub/deep/c.bin"] != "old c" || got["z.bin"] != "old z" {
			t.Errorf("the files at and after the cut changed: c %d bytes, z %d bytes", len(got["sub/deep/c.bin"]), len(got["z.bin"]))
		}
		res, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if len(res.Skipped) != 0 {
			t.Errorf("retry skipped %v", res.Skipped)
		}
		equalTrees(t, tree(t, dest), want)
	})

	t.Run("TooLarge", func(t *testing.T) {
		dest := t.TempDir()
		_, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: 50000})
		if provider.ErrorCode(err) != provider.CodeTooLarge {
			t.Fatalf("export over MaxBytes = %v; want %s", err, provider.CodeTooLarge)
		}
		if got := tree(t, dest); len(got) != 0 {
			t.Errorf("files written by a too large export: %v", got)
		}
	})

	t.Run("WrongSize", func(t *testing.T) {
		for _, delta := range []int64{+10, -3} {
			dest := t.TempDir()
			e.f.MisreportSize("z.bin", delta)
			_, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
			e.f.MisreportSize("z.bin", 0)
			if err == nil {
				t.Fatalf("export with z.bin's size misreported by %d succeeded", delta)
			}
			noTemps(t, dest)
			if _, ok := tree(t, dest)["z.bin"]; ok {
				t.Errorf("z.bin published with a misreported size (%d)", delta)
			}
		}
	})

	t.Run("HostileListing", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "out")
		e.f.ListHostile("../evil")
		_, err := e.c.ExportFiles(ctx(t), provider.ExportRequest{AllocationID: e.id, Dest: dest, MaxBytes: max})
		e.f.ListHostile("")
		if provider.ErrorCode(err) != provider.CodePathEscape {
			t.Fatalf("export of a hostile listing = %v; want %s", err, provider.CodePathEscape)
		}
		if got := tree(t, parent); len(got) != 0 {
			t.Errorf("files written by a refused export: %v", got)
		}
	})

	t.Run("BadRequest", func(t *testing.T) {
		for _, req := range []provider.ExportRequest{
			{AllocationID: e.id, Dest: "relative/dir", MaxBytes: max},
			{AllocationID: e.id, Dest: t.TempDir(), MaxBytes: 0},
		} {
			if _, err := e.c.ExportFiles(ctx(t), req); provider.ErrorCode(err) != provider.CodeInvalidArgument {
				t.Errorf("ExportFiles(%+v) = %v; want %s", req, err, provider.CodeInvalidArgument)
			}
		}
	})
}
