package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/tetherhq/tether/sandbox/fsguard"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openRoot(t testing.TB, dir string) *fsguard.Root {
	t.Helper()
	r, err := fsguard.Open(dir)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func capture(t testing.TB, dir string) ([]byte, *Manifest) {
	t.Helper()
	var buf bytes.Buffer
	m, err := Capture(context.Background(), openRoot(t, dir), &buf, CaptureOptions{WorkspaceID: "ws-1", Epoch: 3, ToolVersion: "test"})
	if err != nil {
		t.Fatalf("capture %s: %v", dir, err)
	}
	return buf.Bytes(), m
}

func restoreInto(t testing.TB, data []byte, rootDir, dir string) (*Manifest, error) {
	t.Helper()
	return Restore(context.Background(), openRoot(t, rootDir), bytes.NewReader(data), RestoreOptions{Dir: dir})
}

// describe lists every path below dir with its type, mode, mtime and
// content digest or link target. Skip filters names out.
func describe(t testing.TB, dir string, withMtime bool, skip func(rel string) bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", fi.Mode())
		if withMtime {
			desc += fmt.Sprintf(" mtime=%d", fi.ModTime().UnixNano())
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		}
		out[rel] = desc
		return nil
	})
	must(t, err)
	return out
}

func diffMaps(a, b map[string]string) string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		if a[k] != b[k] {
			fmt.Fprintf(&sb, "  %s: %q != %q\n", k, a[k], b[k])
		}
	}
	return sb.String()
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error %s, got nil", code)
	}
	var c interface{ ErrorCode() string }
	got := ""
	if e, ok := err.(interface{ ErrorCode() string }); ok {
		got = e.ErrorCode()
	} else if asCoded(err, &c) {
		got = c.ErrorCode()
	}
	if got != code {
		t.Fatalf("want code %s, got %q (%v)", code, got, err)
	}
}

func asCoded(err error, target *interface{ ErrorCode() string }) bool {
	for err != nil {
		if c, ok := err.(interface{ ErrorCode() string }); ok {
			*target = c
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func writeFile(t testing.TB, p, body string, mode fs.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(body), mode))
	must(t, os.Chmod(p, mode))
}

func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

func needTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skip(name + " not installed")
	}
}

func mkfifo(t testing.TB, p string) {
	t.Helper()
	must(t, syscall.Mkfifo(p, 0o644))
}

// noLeftovers fails if any Tether temporary or staging name exists below
// dir.
func noLeftovers(t testing.TB, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && reserved(d.Name()) && d.Name() != ManifestName {
			t.Errorf("leftover %s", p)
		}
		return nil
	})
}
