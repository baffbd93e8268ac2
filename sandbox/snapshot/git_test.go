package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// gitRepo builds the fidelity fixture in base/work: commits, a bare origin
// with one unpushed local commit, a staged change, an unstaged change, an
// untracked file, two stashes, an executable, a symlink, an empty
// directory and a binary file.
func gitRepo(t testing.TB, base string) string {
	needTool(t, "git")
	origin := filepath.Join(base, "origin.git")
	work := filepath.Join(base, "work")
	runGit(t, base, "init", "-q", "--bare", "-b", "main", origin)
	runGit(t, base, "clone", "-q", origin, work)
	writeFile(t, filepath.Join(work, "README.md"), "# fixture\n", 0o644)
	writeFile(t, filepath.Join(work, "src/main.go"), "package main\n", 0o644)
	writeFile(t, filepath.Join(work, "run.sh"), "#!/bin/sh\necho run\n", 0o755)
	must(t, os.Symlink("src/main.go", filepath.Join(work, "main-link")))
	bin := make([]byte, 4096)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(work, "data.bin"), bin, 0o644))
	runGit(t, work, "add", ".")
	runGit(t, work, "commit", "-qm", "initial")
	writeFile(t, filepath.Join(work, "src/main.go"), "package main\n\nfunc main() {}\n", 0o644)
	runGit(t, work, "commit", "-qam", "second")
	runGit(t, work, "tag", "-a", "v1", "-m", "release 1")
	runGit(t, work, "push", "-q", "-u", "origin", "main", "--tags")
	writeFile(t, filepath.Join(work, "src/unpushed.go"), "package main // unpushed\n", 0o644)
	runGit(t, work, "add", ".")
	runGit(t, work, "commit", "-qm", "unpushed")
	writeFile(t, filepath.Join(work, "README.md"), "# stashed once\n", 0o644)
	runGit(t, work, "stash", "-q")
	writeFile(t, filepath.Join(work, "stash-untracked.txt"), "u\n", 0o644)
	runGit(t, work, "stash", "-q", "-u", "-m", "second stash")
	writeFile(t, filepath.Join(work, "src/main.go"), "package main\n\nfunc main() { println(1) }\n", 0o644)
	runGit(t, work, "add", "src/main.go")
	writeFile(t, filepath.Join(work, "README.md"), "# unstaged edit\n", 0o644)
	writeFile(t, filepath.Join(work, "notes/untracked.txt"), "untracked\n", 0o644)
	must(t, os.MkdirAll(filepath.Join(work, "empty/dir"), 0o755))
	return work
}

// gitView is what the git command line reports about a worktree.
func gitView(t testing.TB, dir string) map[string]string {
	t.Helper()
	v := map[string]string{
		"head":    runGit(t, dir, "rev-parse", "HEAD"),
		"status":  runGit(t, dir, "status", "--porcelain=v2", "--branch", "--untracked-files=all"),
		"diff":    runGit(t, dir, "diff"),
		"cached":  runGit(t, dir, "diff", "--cached"),
		"stashes": runGit(t, dir, "stash", "list", "--format=%H %gs"),
		"ahead":   runGit(t, dir, "log", "--format=%H %s", "@{u}.."),
		"tags":    runGit(t, dir, "tag", "-n"),
		"branch":  runGit(t, dir, "branch", "-vv", "--format=%(refname) %(objectname) %(upstream)"),
	}
	// Every stash's content, the untracked part of a stash -u included.
	for i := range strings.Count(v["stashes"], "\n") {
		ref := fmt.Sprintf("stash@{%d}", i)
		v[ref] = runGit(t, dir, "stash", "show", "-p", "--include-untracked", ref)
	}
	return v
}

func notGit(rel string) bool { return rel == ".git" || strings.HasPrefix(rel, ".git/") }

// checkFidelity captures ws, restores it into a fresh directory and
// compares what git and the file system report.
func checkFidelity(t *testing.T, ws string) *Manifest {
	wantGit := gitView(t, ws)
	wantFiles := describe(t, ws, true, notGit)
	data, m := capture(t, ws)
	if m.Git == nil {
		t.Fatalf("no git state in manifest (git_error %q)", m.GitError)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	must(t, os.Mkdir(dst, 0o755))
	if _, err := restoreInto(t, data, dst, "."); err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(wantFiles, describe(t, dst, true, notGit)); d != "" {
		t.Fatalf("worktree files differ:\n%s", d)
	}
	got := gitView(t, dst)
	for k, v := range wantGit {
		if got[k] != v {
			t.Errorf("git %s differs:\nbefore:\n%s\nafter:\n%s", k, v, got[k])
		}
	}
	runGit(t, dst, "fsck", "--no-progress", "--strict")
	// The restored repository's own view agrees with the manifest.
	root := openRoot(t, dst)
	var buf bytes.Buffer
	m2, err := Capture(context.Background(), root, &buf, CaptureOptions{})
	must(t, err)
	if m2.Git == nil || *m2.Git != *m.Git {
		t.Errorf("git state after restore %+v (git_error %q), before %+v", m2.Git, m2.GitError, m.Git)
	}
	return m
}

func TestGitFidelityPlain(t *testing.T) {
	work := gitRepo(t, t.TempDir())
	m := checkFidelity(t, work)
	g := m.Git
	if g.Branch != "main" || g.Upstream != "origin/main" || g.Ahead != 1 || g.Behind != 0 ||
		g.Staged != 1 || g.Unstaged != 1 || g.Untracked != 1 || !g.Dirty || m.GitError != "" {
		t.Fatalf("git state %+v git_error %q", g, m.GitError)
	}
}

func TestGitLockFileIsBusy(t *testing.T) {
	for _, lock := range []string{"index.lock", "HEAD.lock", "refs/heads/main.lock", "shallow.lock"} {
		t.Run(lock, func(t *testing.T) {
			work := gitRepo(t, t.TempDir())
			writeFile(t, filepath.Join(work, ".git", lock), "", 0o644)
			var buf bytes.Buffer
			_, err := Capture(context.Background(), openRoot(t, work), &buf, CaptureOptions{})
			wantCode(t, err, CodeGitBusy)
		})
	}
}

// TestGitUnreadable: a .git directory go-git cannot read is still
// archived as files, with the reason in the manifest.
func TestGitUnreadable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".git/HEAD"), "garbage", 0o644)
	_, m := capture(t, dir)
	if m.Git != nil || m.GitError == "" || m.Totals.Files != 1 {
		t.Fatalf("git %+v error %q totals %+v", m.Git, m.GitError, m.Totals)
	}
}

// secret is what an agent should never get back from the runner: bytes of
// a host file outside its workspace.
func secret(t testing.TB) string {
	b := make([]byte, 24)
	_, err := rand.Read(b)
	must(t, err)
	return "SECRET-" + hex.EncodeToString(b)
}

// hostRepo is a repository outside the workspace (the operator's, say)
// with one commit holding a secret file, and the secret also as a plain
// file in its git directory and in its objects directory. It returns the
// repository, the secret and the names of the secret commit's objects.
func hostRepo(t *testing.T) (dir, sec string, objects []string) {
	needTool(t, "git")
	dir = filepath.Join(t.TempDir(), "operator")
	sec = secret(t)
	runGit(t, filepath.Dir(dir), "init", "-q", "-b", "main", dir)
	writeFile(t, filepath.Join(dir, "secret.txt"), sec+"\n", 0o600)
	runGit(t, dir, "add", ".")
	runGit(t, dir, "commit", "-qm", "the operator's secret")
	writeFile(t, filepath.Join(dir, ".git/operator.token"), sec, 0o600)
	writeFile(t, filepath.Join(dir, ".git/objects/snapshot.key"), sec, 0o600)
	for _, rev := range []string{"HEAD", "HEAD^{tree}", "HEAD:secret.txt"} {
		objects = append(objects, strings.TrimSpace(runGit(t, dir, "rev-parse", rev)))
	}
	return dir, sec, objects
}

// captureBounded captures dir, failing the test if the capture does not
// end within a few seconds (a host FIFO opened by name would block it).
func captureBounded(t *testing.T, dir string) ([]byte, *Manifest) {
	t.Helper()
	type result struct {
		data []byte
		m    *Manifest
		err  error
	}
	root := openRoot(t, dir)
	done := make(chan result, 1)
	go func() {
		var buf bytes.Buffer
		m, err := Capture(context.Background(), root, &buf, CaptureOptions{WorkspaceID: "ws-1"})
		done <- result{buf.Bytes(), m, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("capture %s: %v", dir, r.err)
		}
		return r.data, r.m
	case <-time.After(30 * time.Second):
		t.Fatal("capture is blocked: it opened something outside the workspace")
		return nil, nil
	}
}

// checkNotFollowed checks a capture of ws whose Git metadata names
// directories elsewhere (pointer, a workspace-relative file): the capture
// lost nothing of the workspace (restored, it is the same tree, pointer
// the plain file it was), took nothing from elsewhere (no secret bytes in
// the archive, no name that is not in the workspace), and says in
// GitError why Git state was not read.
func checkNotFollowed(t *testing.T, ws, pointer, sec string, foreign []string) *Manifest {
	t.Helper()
	want := describe(t, ws, true, nil)
	pointed, err := os.ReadFile(filepath.Join(ws, pointer))
	must(t, err)
	data, m := captureBounded(t, ws)
	if m.Git != nil || !strings.Contains(m.GitError, "not followed") || !strings.Contains(m.GitError, "outside the workspace") {
		t.Fatalf("git %+v, git_error %q: want no Git state and the reason", m.Git, m.GitError)
	}
	if len(m.Skipped) != 0 {
		t.Fatalf("skipped %+v", m.Skipped)
	}
	var ptr *Entry
	for i, e := range m.Entries {
		if e.Path == pointer {
			ptr = &m.Entries[i]
		}
	}
	if ptr == nil || ptr.Type != TypeFile || ptr.Size != int64(len(pointed)) {
		t.Fatalf("%s in the manifest: %+v, want the regular file of %d bytes", pointer, ptr, len(pointed))
	}
	if got := archivedFile(t, data, pointer); !bytes.Equal(got, pointed) {
		t.Fatalf("%s archived as %q, want %q", pointer, got, pointed)
	}
	dec, err := zstd.NewReader(bytes.NewReader(data))
	must(t, err)
	raw, err := io.ReadAll(dec)
	dec.Close()
	must(t, err)
	if bytes.Contains(raw, []byte(sec)) {
		t.Fatal("the archive holds the secret of a host file outside the workspace")
	}
	names, _, _ := readTar(t, data)
	for _, n := range names {
		n = strings.TrimSuffix(n, "/")
		if n == ManifestName {
			continue
		}
		if _, ok := want[n]; !ok {
			t.Errorf("archive entry %s is not in the workspace", n)
		}
		for _, h := range foreign {
			if strings.HasSuffix(n, h[:2]+"/"+h[2:]) {
				t.Errorf("archive entry %s is an object of the host repository", n)
			}
		}
	}
	dst := filepath.Join(t.TempDir(), "restored")
	must(t, os.Mkdir(dst, 0o755))
	if _, err := restoreInto(t, data, dst, "."); err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(want, describe(t, dst, true, nil)); d != "" {
		t.Fatalf("restored tree differs:\n%s", d)
	}
	return m
}

// A .git file ("gitdir: PATH") is archived as the file it is: the git
// directory it names, wherever it is, is never read.
func TestGitFileNotFollowed(t *testing.T) {
	t.Run("names a host directory with a secret", func(t *testing.T) {
		host, sec, objs := hostRepo(t)
		ws := t.TempDir()
		writeFile(t, filepath.Join(ws, "a.txt"), "mine\n", 0o644)
		writeFile(t, filepath.Join(ws, ".git"), "gitdir: "+filepath.Join(host, ".git")+"\n", 0o644)
		checkNotFollowed(t, ws, ".git", sec, objs)
	})
	t.Run("relative, out of the workspace", func(t *testing.T) {
		host, sec, objs := hostRepo(t)
		ws := filepath.Join(filepath.Dir(host), "ws")
		must(t, os.Mkdir(ws, 0o755))
		writeFile(t, filepath.Join(ws, ".git"), "gitdir: ../operator/.git\n", 0o644)
		checkNotFollowed(t, ws, ".git", sec, objs)
	})
	t.Run("names FIFOs", func(t *testing.T) {
		host := t.TempDir()
		for _, name := range []string{"HEAD", "config", "commondir", "index"} {
			mkfifo(t, filepath.Join(host, name))
		}
		ws := t.TempDir()
		writeFile(t, filepath.Join(ws, ".git"), "gitdir: "+host+"\n", 0o644)
		checkNotFollowed(t, ws, ".git", "never written", nil)
	})
	t.Run("names nothing", func(t *testing.T) {
		ws := t.TempDir()
		writeFile(t, filepath.Join(ws, ".git"), "gitdir: /nonexistent/.git/worktrees/x\n", 0o644)
		checkNotFollowed(t, ws, ".git", "never written", nil)
	})
	t.Run("a real linked worktree", func(t *testing.T) {
		base := t.TempDir()
		work := gitRepo(t, base)
		wt := filepath.Join(base, "wt")
		runGit(t, work, "worktree", "add", "-q", "-b", "feature", wt, "HEAD")
		writeFile(t, filepath.Join(wt, "feature.txt"), "feature\n", 0o644)
		// A lock in the main repository is none of this capture's business.
		writeFile(t, filepath.Join(work, ".git/worktrees/wt/index.lock"), "", 0o644)
		sec := secret(t)
		writeFile(t, filepath.Join(work, ".git/worktrees/wt/secret"), sec, 0o644)
		objs := []string{strings.TrimSpace(runGit(t, work, "rev-parse", "HEAD"))}
		checkNotFollowed(t, wt, ".git", sec, objs)
	})
}

// A .git directory is archived as its files, objects/info/alternates and
// commondir included, and neither is followed: no object, no file of the
// directories they name is read.
func TestGitAlternatesAndCommondirNotFollowed(t *testing.T) {
	plain := func(t *testing.T) string {
		ws := filepath.Join(t.TempDir(), "ws")
		runGit(t, filepath.Dir(ws), "init", "-q", "-b", "main", ws)
		writeFile(t, filepath.Join(ws, "a.txt"), "mine\n", 0o644)
		runGit(t, ws, "add", ".")
		runGit(t, ws, "commit", "-qm", "mine")
		return ws
	}
	t.Run("alternates name a host objects directory", func(t *testing.T) {
		host, sec, objs := hostRepo(t)
		ws := plain(t)
		writeFile(t, filepath.Join(ws, ".git/objects/info/alternates"), filepath.Join(host, ".git/objects")+"\n", 0o644)
		// A ref to the host's secret commit: following the alternates
		// would make its objects part of the repository.
		writeFile(t, filepath.Join(ws, ".git/refs/heads/steal"), objs[0]+"\n", 0o644)
		m := checkNotFollowed(t, ws, ".git/objects/info/alternates", sec, objs)
		if !strings.Contains(m.GitError, "alternates") {
			t.Fatalf("git_error %q", m.GitError)
		}
	})
	t.Run("a clone --shared", func(t *testing.T) {
		host, sec, objs := hostRepo(t)
		ws := filepath.Join(t.TempDir(), "shared")
		runGit(t, filepath.Dir(ws), "clone", "-q", "--shared", host, ws)
		// The checkout holds the secret; the workspace's own commit drops
		// it, so only objects borrowed from the host still do.
		runGit(t, ws, "rm", "-q", "secret.txt")
		runGit(t, ws, "commit", "-qm", "no secret here")
		checkNotFollowed(t, ws, ".git/objects/info/alternates", sec, objs)
	})
	t.Run("commondir names a host directory", func(t *testing.T) {
		host, sec, objs := hostRepo(t)
		ws := plain(t)
		writeFile(t, filepath.Join(ws, ".git/commondir"), filepath.Join(host, ".git")+"\n", 0o644)
		m := checkNotFollowed(t, ws, ".git/commondir", sec, objs)
		if !strings.Contains(m.GitError, "commondir") {
			t.Fatalf("git_error %q", m.GitError)
		}
	})
}
