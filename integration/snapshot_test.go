package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/controller/api"
)

// gitRepo builds a repository with every kind of state a snapshot must keep: commits, an origin
// with an unpushed local commit, staged, unstaged and untracked changes, a stash, an executable,
// a symlink, an empty directory and a binary file.
func gitRepo(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	origin, src := filepath.Join(base, "origin.git"), filepath.Join(base, "src")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@t.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+base)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	git(base, "init", "-q", "--bare", "-b", "main", origin)
	git(base, "init", "-q", "-b", "main", src)
	write("README.md", "# repo\n", 0o644)
	write("run.sh", "#!/bin/sh\necho run\n", 0o755)
	write("lib/code.go", "package lib\n", 0o644)
	write("bin.dat", "\x00\x01\x02\xff binary \x00", 0o644)
	if err := os.Symlink("lib/code.go", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	git(src, "add", ".")
	git(src, "commit", "-q", "-m", "first")
	git(src, "remote", "add", "origin", origin)
	git(src, "push", "-q", "-u", "origin", "main")
	write("lib/code.go", "package lib\n\n// unpushed\n", 0o644)
	git(src, "commit", "-q", "-am", "unpushed")
	write("README.md", "# repo\nstashed\n", 0o644)
	git(src, "stash", "-q")
	write("staged.txt", "staged\n", 0o644)
	git(src, "add", "staged.txt")
	write("README.md", "# repo\nunstaged\n", 0o644)
	write("untracked.txt", "untracked\n", 0o644)
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	return src
}

// gitView is what `git` and the file system show of a workspace.
const gitView = `set -e
git rev-parse HEAD
git status --porcelain=v2 --branch
git diff
git diff --cached
git stash list
git log --format=%H @{u}..
find . -path ./.git -prune -o -print | LC_ALL=C sort | while read -r p; do
  if [ -L "$p" ]; then echo "$p link $(readlink "$p")"
  elif [ -d "$p" ]; then echo "$p dir $(stat -c %a "$p")"
  else echo "$p file $(stat -c %a "$p") $(sha256sum < "$p" | cut -c1-64)"; fi
done`

func TestSnapshotRestoreKeepsFilesAndGitState(t *testing.T) {
	src := gitRepo(t)
	c := startController(t, serveOpts{})
	ws := c.createWorkspace(t, "--source", src, "--name", "orig")
	before := c.mustCLI(t, "exec", "orig", "--", "sh", "-c", gitView)
	if !strings.Contains(before, "# branch.ab +1 -0") || !strings.Contains(before, "stash@{0}") {
		t.Fatalf("fixture lacks the state under test:\n%s", before)
	}

	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "orig", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.ID == "" || snap.WorkspaceID != ws.ID || snap.Bytes == 0 || len(snap.SHA256) != 64 || snap.Entries == 0 || len(snap.Git) == 0 {
		t.Fatalf("snapshot receipt: %+v", snap)
	}
	var git struct {
		Branch string `json:"branch"`
		Ahead  int    `json:"ahead"`
		Dirty  bool   `json:"dirty"`
	}
	if err := json.Unmarshal(snap.Git, &git); err != nil || git.Branch != "main" || git.Ahead != 1 || !git.Dirty {
		t.Fatalf("manifest git block %s: %v", snap.Git, err)
	}
	if out := c.mustCLI(t, "snapshot", "verify", snap.ID); !strings.Contains(out, "ok") {
		t.Fatalf("verify: %s", out)
	}
	// The sandbox goes away; the snapshot does not.
	c.mustCLI(t, "workspace", "rm", "orig")
	var restored api.Workspace
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "restore", snap.ID, "--name", "copy", "--json")), &restored); err != nil {
		t.Fatal(err)
	}
	if restored.State != api.StateReady || restored.AllocationID == ws.AllocationID {
		t.Fatalf("restored workspace: %+v", restored)
	}
	after := c.mustCLI(t, "exec", "copy", "--", "sh", "-c", gitView)
	if after != before {
		t.Fatalf("git and files differ after restore\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Export is the plain archive: zstd -d | tar -x reads it, manifest last.
	out := filepath.Join(t.TempDir(), "snap.tar.zst")
	c.mustCLI(t, "snapshot", "export", snap.ID, "-o", out)
	names := listArchive(t, out)
	if len(names) == 0 || names[len(names)-1] != ".tether-manifest.json" {
		t.Fatalf("archive entries end with %v", names[max(0, len(names)-3):])
	}
}

func TestSnapshotEncryptedInS3(t *testing.T) {
	s3 := minioFor(t)
	c := startController(t, serveOpts{extraArgs: []string{"--blobs", s3.url}})
	c.createWorkspace(t, "--source", gitRepo(t), "--name", "s3ws")
	var snap api.Snapshot
	if err := json.Unmarshal([]byte(c.mustCLI(t, "snapshot", "create", "s3ws", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	if !snap.Encrypted || !strings.HasSuffix(snap.ObjectKey, ".age") {
		t.Fatalf("S3 snapshots are encrypted by default: %+v", snap)
	}
	raw := s3.object(t, snap.ObjectKey)
	if int64(len(raw)) != snap.Bytes || strings.Contains(string(raw), "unpushed") || !strings.HasPrefix(string(raw), "age-encryption.org/v1") {
		t.Fatalf("stored object is not the age-encrypted archive of %d bytes (got %d bytes)", snap.Bytes, len(raw))
	}
	c.mustCLI(t, "snapshot", "verify", snap.ID)
	out := filepath.Join(t.TempDir(), "snap.tar.zst")
	c.mustCLI(t, "snapshot", "export", snap.ID, "-o", out)
	if names := listArchive(t, out); names[len(names)-1] != ".tether-manifest.json" {
		t.Fatal("export of an encrypted snapshot is not the plain archive")
	}
	c.mustCLI(t, "snapshot", "restore", snap.ID, "--name", "back")
	if r := c.cli(t, nil, "exec", "back", "--", "git", "log", "--format=%s", "-1"); r.Code != 0 || r.Stdout != "unpushed\n" {
		t.Fatalf("restored from S3: %+v", r)
	}
}
