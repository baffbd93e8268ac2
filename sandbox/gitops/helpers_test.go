package gitops

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/tetherhq/tether/protocol"
)

// clock gives every fixture commit a later date than the one before, so walks ordered by date
// see the history Git sees.
var clock atomic.Int64

func gitBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git binary")
	}
	return p
}

// testEnv isolates fixture git commands from the user's configuration and the runner's GIT_*.
func testEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	ts := 1_700_000_000 + clock.Add(60)
	return append(env, "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		fmt.Sprintf("GIT_AUTHOR_DATE=@%d +0000", ts), fmt.Sprintf("GIT_COMMITTER_DATE=@%d +0000", ts))
}

// run runs the real git in dir and returns its trimmed output.
func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := runIn(t, dir, nil, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func runIn(t *testing.T, dir string, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(gitBin(t), append([]string{"-C", dir}, args...)...)
	cmd.Env = testEnv(os.TempDir())
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}

// newSource makes a non-bare repository on main with a first commit.
func newSource(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run(t, dir, "init", "-q", "-b", "main")
	write(t, dir, "README.md", "hello\n")
	write(t, dir, "src/app.go", "package app\n")
	write(t, dir, "bin/run.sh", "#!/bin/sh\necho run\n")
	if err := os.Chmod(filepath.Join(dir, "bin/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/app.go", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, ".gitignore", "*.log\n")
	run(t, dir, "add", "-A")
	run(t, dir, "commit", "-q", "-m", "first")
	return dir
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// commit writes files (content "" removes one), commits them all and returns the commit.
func commit(t *testing.T, dir, msg string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		if content == "" {
			run(t, dir, "rm", "-q", name)
			continue
		}
		write(t, dir, name, content)
	}
	run(t, dir, "add", "-A")
	run(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
	return run(t, dir, "rev-parse", "HEAD")
}

// pack is `git pack-objects --revs --stdout` of revs (one per line: "C" or "^C").
func pack(t *testing.T, dir string, revs ...string) []byte {
	t.Helper()
	out, err := runIn(t, dir, []byte(strings.Join(revs, "\n")+"\n"), "pack-objects", "--revs", "--stdout", "-q")
	if err != nil {
		t.Fatalf("pack-objects: %v\n%s", err, out)
	}
	return out
}

func wantCode(t *testing.T, err error, code protocol.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s, got success", code)
	}
	if got := protocol.CodeOf(err); got != code {
		t.Fatalf("want %s, got %s (%v)", code, got, err)
	}
}

func emptyRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func assertEmpty(t *testing.T, root string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%s is not empty: %v", root, names)
	}
}

// sameFiles compares two worktrees (without .git): names, types, modes, contents, link targets.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	list := func(root string) map[string]string {
		out := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == ".git" {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				out[rel] = "link:" + target
			case fi.IsDir():
				out[rel] = "dir"
			default:
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				out[rel] = fmt.Sprintf("%o:%s", fi.Mode().Perm()&0o100, b)
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return out
	}
	la, lb := list(a), list(b)
	for k, v := range la {
		if lb[k] != v {
			t.Errorf("%s: %q in %s, %q in %s", k, v, a, lb[k], b)
		}
	}
	for k := range lb {
		if _, ok := la[k]; !ok {
			t.Errorf("%s: only in %s", k, b)
		}
	}
}

func mustHash(t *testing.T, s string) plumbing.Hash {
	t.Helper()
	h, err := parseCommit("commit", s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func plumbingBranch(name string) plumbing.ReferenceName { return plumbing.NewBranchReferenceName(name) }
