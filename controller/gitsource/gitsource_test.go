package gitsource

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/protocol"
)

// Tests only ever use paths on this host, never a network address.

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid",
		"-c", "init.defaultBranch=trunk", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(gitEnv(), "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes name with content into the work tree at dir and commits it.
func commit(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, dir, "add", name)
	gitT(t, dir, "commit", "-q", "-m", "add "+name)
	return gitT(t, dir, "rev-parse", "HEAD")
}

// newSource makes a non-bare repository on branch "trunk" with one commit.
func newSource(t *testing.T) (dir, first string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "src")
	gitT(t, t.TempDir(), "init", "-q", dir)
	gitT(t, dir, "symbolic-ref", "HEAD", "refs/heads/trunk")
	return dir, commit(t, dir, "a.txt", strings.Repeat("first version\n", 2000))
}

func ensure(t *testing.T, source string) *Repo {
	t.Helper()
	r, err := Ensure(context.Background(), "", source, filepath.Join(t.TempDir(), "projects", "p1.git"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wantCode(t *testing.T, err error, code protocol.Code) {
	t.Helper()
	if got := protocol.CodeOf(err); got != code {
		t.Fatalf("error %v: code %s, want %s", err, got, code)
	}
}

func siblings(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestEnsureClonesAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	src, first := newSource(t)
	r := ensure(t, src)
	if got := gitT(t, r.Dir, "rev-parse", "--is-bare-repository"); got != "true" {
		t.Fatalf("base clone is not bare: %s", got)
	}
	if id, err := r.Resolve(ctx, "trunk"); err != nil || id != first {
		t.Fatalf("Resolve(trunk) = %s, %v; want %s", id, err, first)
	}
	// Nothing shared with the source: no alternates, objects copied.
	if _, err := os.Stat(filepath.Join(r.Dir, "objects", "info", "alternates")); err == nil {
		t.Fatal("base clone uses alternates")
	}
	again, err := Ensure(ctx, "", src, r.Dir)
	if err != nil || again.Dir != r.Dir {
		t.Fatalf("second Ensure: %v, %+v", err, again)
	}
	if names := siblings(t, r.Dir); len(names) != 1 || names[0] != "p1.git" {
		t.Fatalf("siblings after Ensure: %v", names)
	}
	if n, err := r.Size(); err != nil || n <= 0 {
		t.Fatalf("Size = %d, %v", n, err)
	}
}

func TestEnsureEnvIgnoresGitDir(t *testing.T) {
	src, first := newSource(t)
	t.Setenv("GIT_DIR", t.TempDir())
	t.Setenv("GIT_WORK_TREE", t.TempDir())
	r := ensure(t, src)
	if id, err := r.Resolve(context.Background(), "trunk"); err != nil || id != first {
		t.Fatalf("Resolve = %s, %v", id, err)
	}
}

func TestEnsureCleansLeftovers(t *testing.T) {
	src, _ := newSource(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "p1.git")
	for _, name := range []string{"p1.git.tmp-0123456789abcdef", "p1.git.deleting-fedcba9876543210",
		"p2.git.tmp-0123456789abcdef", "p3.tmp-notrandom"} {
		if err := os.MkdirAll(filepath.Join(parent, name, "objects"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Ensure(context.Background(), "", src, dir); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(siblings(t, dir), " ")
	if got != "p1.git p2.git.tmp-0123456789abcdef p3.tmp-notrandom" {
		t.Fatalf("after Ensure: %s (only p1's leftovers go)", got)
	}
	if err := RemoveLeftovers(parent); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(siblings(t, dir), " "); got != "p1.git p3.tmp-notrandom" {
		t.Fatalf("after RemoveLeftovers: %s", got)
	}
	if err := RemoveLeftovers(filepath.Join(parent, "missing")); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureBadSources(t *testing.T) {
	ctx := context.Background()
	notRepo := t.TempDir()
	dir := filepath.Join(t.TempDir(), "p.git")
	// A missing path and a directory that is not a repository are the caller's mistake.
	for _, src := range []string{filepath.Join(t.TempDir(), "missing"), notRepo, "-uhello", "a\nb"} {
		_, err := Ensure(ctx, "", src, dir)
		wantCode(t, err, protocol.CodeInvalidArgument)
		if _, serr := os.Stat(dir); serr == nil {
			t.Fatalf("%q: base clone created", src)
		}
	}
	if names := siblings(t, dir); len(names) != 0 {
		t.Fatalf("leftovers after failed clones: %v", names)
	}
	// An existing directory that is not a bare repository is not silently adopted.
	src, _ := newSource(t)
	_, err := Ensure(ctx, "", src, notRepo)
	wantCode(t, err, protocol.CodeCorrupt)
	// A missing git binary is reported, not mistaken for a bad source.
	_, err = Ensure(ctx, filepath.Join(t.TempDir(), "no-git"), src, dir)
	wantCode(t, err, protocol.CodeInternal)
}

func TestDefaultBranch(t *testing.T) {
	src, _ := newSource(t)
	r := ensure(t, src)
	if b, err := r.DefaultBranch(context.Background()); err != nil || b != "trunk" {
		t.Fatalf("DefaultBranch = %q, %v", b, err)
	}
	gitT(t, src, "checkout", "-q", "-b", "dev")
	if b, err := r.DefaultBranch(context.Background()); err != nil || b != "dev" {
		t.Fatalf("DefaultBranch after checkout = %q, %v", b, err)
	}
}

func TestFetch(t *testing.T) {
	ctx := context.Background()
	src, first := newSource(t)
	r := ensure(t, src)
	gitT(t, r.Dir, "branch", "tether/task1", first) // a task branch living in the base clone

	second := commit(t, src, "b.txt", "second\n")
	got, err := r.Fetch(ctx, "trunk")
	if err != nil || got != second {
		t.Fatalf("Fetch = %s, %v; want %s", got, err, second)
	}
	if id, _ := r.Resolve(ctx, "tether/task1"); id != first {
		t.Fatalf("task branch moved to %s", id)
	}
	// The source is the truth: a rewound branch is followed.
	gitT(t, src, "reset", "-q", "--hard", first)
	rewound := commit(t, src, "c.txt", "other history\n")
	if got, err := r.Fetch(ctx, "refs/heads/trunk"); err != nil || got != rewound {
		t.Fatalf("Fetch after rewind = %s, %v; want %s", got, err, rewound)
	}
	// Only the named ref is fetched.
	gitT(t, src, "branch", "other")
	if _, err := r.Resolve(ctx, "other"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("Resolve(other) before fetching it: %v", err)
	}

	_, err = r.Fetch(ctx, "nope")
	wantCode(t, err, protocol.CodeNotFound)
	for _, bad := range []string{"-x", "a..b", "a b", "a:b", "", "a\x01", "x.lock", "/x"} {
		_, err = r.Fetch(ctx, bad)
		wantCode(t, err, protocol.CodeInvalidArgument)
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	_, err = r.Fetch(ctx, "trunk")
	wantCode(t, err, protocol.CodeUnavailable)
	if !strings.Contains(err.Error(), "does not appear to be a git repository") {
		t.Fatalf("error lacks git's stderr: %v", err)
	}
	_, err = r.DefaultBranch(ctx)
	wantCode(t, err, protocol.CodeUnavailable)
}

func TestResolveAndIsAncestor(t *testing.T) {
	ctx := context.Background()
	src, first := newSource(t)
	second := commit(t, src, "b.txt", "b\n")
	r := ensure(t, src)
	gitT(t, r.Dir, "tag", "trunk", first) // a tag shadowing the branch name

	if id, err := r.Resolve(ctx, "trunk"); err != nil || id != second {
		t.Fatalf("Resolve(trunk) = %s, %v; want the branch %s", id, err, second)
	}
	if id, err := r.Resolve(ctx, first[:10]); err != nil || id != first {
		t.Fatalf("Resolve(short id) = %s, %v", id, err)
	}
	_, err := r.Resolve(ctx, strings.Repeat("0", 40))
	wantCode(t, err, protocol.CodeNotFound)
	_, err = r.Resolve(ctx, "--all")
	wantCode(t, err, protocol.CodeInvalidArgument)

	if !r.HasCommit(ctx, first) || r.HasCommit(ctx, strings.Repeat("1", 40)) || r.HasCommit(ctx, "-h") {
		t.Fatal("HasCommit wrong")
	}
	if ok, err := r.IsAncestor(ctx, first, "trunk"); err != nil || !ok {
		t.Fatalf("IsAncestor(first, trunk) = %v, %v", ok, err)
	}
	gitT(t, r.Dir, "branch", "old", first)
	if ok, err := r.IsAncestor(ctx, second, "old"); err != nil || ok {
		t.Fatalf("IsAncestor(second, old) = %v, %v", ok, err)
	}
	if ok, err := r.IsAncestor(ctx, strings.Repeat("2", 40), "trunk"); err != nil || ok {
		t.Fatalf("IsAncestor(unknown) = %v, %v", ok, err)
	}
	_, err = r.IsAncestor(ctx, first, "no-such-branch")
	wantCode(t, err, protocol.CodeNotFound)
}

// packObjects reads the object count from a pack's header.
func packObjects(t *testing.T, pack []byte) uint32 {
	t.Helper()
	if len(pack) < 12 || string(pack[:4]) != "PACK" {
		t.Fatalf("not a pack: %q", pack[:min(len(pack), 12)])
	}
	return binary.BigEndian.Uint32(pack[8:12])
}

func TestPack(t *testing.T) {
	ctx := context.Background()
	src, first := newSource(t)
	r := ensure(t, src)
	second := commit(t, src, "b.txt", strings.Repeat("second\n", 3000))
	if _, err := r.Fetch(ctx, "trunk"); err != nil {
		t.Fatal(err)
	}

	var full, inc bytes.Buffer
	if err := r.Pack(ctx, &full, []string{second}, nil); err != nil {
		t.Fatal(err)
	}
	// A have the base clone does not know (the receiver's own commit) is skipped.
	if err := r.Pack(ctx, &inc, []string{"trunk"}, []string{first, strings.Repeat("3", 40)}); err != nil {
		t.Fatal(err)
	}
	nFull, nInc := packObjects(t, full.Bytes()), packObjects(t, inc.Bytes())
	if nFull != 6 || nInc != 3 || inc.Len() >= full.Len() { // 2 commits+2 trees+2 blobs; 1+1+1
		t.Fatalf("full pack %d objects/%d bytes, incremental %d/%d", nFull, full.Len(), nInc, inc.Len())
	}

	// The full pack stands alone in an empty repository.
	dst := filepath.Join(t.TempDir(), "dst.git")
	gitT(t, t.TempDir(), "init", "-q", "--bare", dst)
	cmd := exec.Command("git", "--git-dir="+dst, "index-pack", "--stdin")
	cmd.Stdin, cmd.Env = &full, gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("index-pack: %v\n%s", err, out)
	}
	gitT(t, dst, "cat-file", "-e", second+"^{commit}")
	gitT(t, dst, "cat-file", "-e", first+":a.txt")
	// The incremental one completes a repository that has the first commit.
	dst2 := filepath.Join(t.TempDir(), "dst2.git")
	gitT(t, t.TempDir(), "clone", "-q", "--bare", "--no-local", src, dst2)
	gitT(t, dst2, "update-ref", "refs/heads/trunk", first)
	gitT(t, dst2, "reflog", "expire", "--expire=now", "--all")
	gitT(t, dst2, "gc", "-q", "--prune=now")
	if gitT(t, dst2, "cat-file", "-t", first) != "commit" {
		t.Fatal("setup")
	}
	cmd = exec.Command("git", "--git-dir="+dst2, "index-pack", "--stdin")
	cmd.Stdin, cmd.Env = &inc, gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("index-pack incremental: %v\n%s", err, out)
	}
	gitT(t, dst2, "cat-file", "-e", second+":b.txt")

	err := r.Pack(ctx, io.Discard, []string{strings.Repeat("4", 40)}, nil)
	wantCode(t, err, protocol.CodeNotFound)
	err = r.Pack(ctx, io.Discard, nil, []string{first})
	wantCode(t, err, protocol.CodeInvalidArgument)
	err = r.Pack(ctx, io.Discard, []string{second}, []string{"--all"})
	wantCode(t, err, protocol.CodeInvalidArgument)
	// The writer's own error comes back, not git's SIGPIPE.
	boom := protocol.Errorf(protocol.CodeTooLarge, "quota")
	err = r.Pack(ctx, failWriter{boom}, []string{second}, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("Pack into failing writer: %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestDeleteBranch(t *testing.T) {
	ctx := context.Background()
	src, _ := newSource(t)
	r := ensure(t, src)
	gitT(t, r.Dir, "branch", "tether/w2")
	if err := r.DeleteBranch(ctx, "tether/w2"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteBranch(ctx, "tether/w2"); err != nil {
		t.Fatalf("deleting a missing branch: %v", err)
	}
	wantCode(t, r.DeleteBranch(ctx, "-f"), protocol.CodeInvalidArgument)
}

func TestRemove(t *testing.T) {
	src, _ := newSource(t)
	r := ensure(t, src)
	if err := Remove(r.Dir); err != nil {
		t.Fatal(err)
	}
	if err := Remove(r.Dir); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if names := siblings(t, r.Dir); len(names) != 0 {
		t.Fatalf("left behind: %v", names)
	}
}

func TestCanceled(t *testing.T) {
	src, _ := newSource(t)
	r := ensure(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Fetch(ctx, "trunk")
	wantCode(t, err, protocol.CodeCanceled)
}

func TestIsAncestorCanceledIsAnError(t *testing.T) {
	src, first := newSource(t)
	r := ensure(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := r.IsAncestor(ctx, first, "trunk"); ok || protocol.CodeOf(err) != protocol.CodeCanceled {
		t.Fatalf("IsAncestor with a canceled context = %v, %v", ok, err)
	}
}

// Branch names are checked before git sees them: nothing that git would read as an option, a
// revision expression or another ref than refs/heads/<name>.
func TestCheckBranch(t *testing.T) {
	for _, ok := range []string{"main", "tether/task-1", "feature/x.y", "ops_fix-2"} {
		if err := CheckBranch(ok); err != nil {
			t.Errorf("CheckBranch(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "@", "HEAD", "-x", "refs/heads/x", "refs/tags/v1", "a..b", "a b", "a~1", "a^", "a:b",
		"a?", "a*", "a[", `a\b`, "a@{1}", "a.", "a.lock", "a//b", "/a", "a/", ".a", "a/.b", "a\x00b", "a\x7fb"} {
		if err := CheckBranch(bad); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Errorf("CheckBranch(%q) = %v, want invalid_argument", bad, err)
		}
	}
}

// Every git the controller runs ignores the system's, the user's and the environment's config,
// runs no hook and no fsmonitor, and leaves no hook in a new base clone: a global config with an
// alias, a hooks path, an fsmonitor, a url rewrite to an ssh command that would each write a
// marker changes nothing. (DESIGN.md safety contract 7: nothing on the controller's host runs
// or parses as config what a workspace wrote.)
func TestGitIgnoresOutsideConfigAndHooks(t *testing.T) {
	ctx := context.Background()
	src, first := newSource(t)
	home := t.TempDir()
	marker := filepath.Join(t.TempDir(), "pwned")
	hooks := filepath.Join(home, "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$0 $*\" >> " + marker + "\n"
	for _, h := range []string{"reference-transaction", "post-checkout", "pre-push", "post-index-change", "fsmonitor"} {
		if err := os.WriteFile(filepath.Join(hooks, h), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	evil := "[core]\n\thooksPath = " + hooks + "\n\tfsmonitor = " + filepath.Join(hooks, "fsmonitor") +
		"\n\tsshCommand = sh -c 'echo ssh >> " + marker + "'; false #\n" +
		"[url \"ssh://evil.invalid/x\"]\n\tinsteadOf = " + src + "\n" +
		"[alias]\n\tfetch = !echo alias >> " + marker + "\n" +
		"[init]\n\ttemplateDir = " + home + "/template\n"
	if err := os.MkdirAll(filepath.Join(home, "template", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "template", "hooks", "reference-transaction"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(home, ".gitconfig"), filepath.Join(home, "xdg", "git", "config"), filepath.Join(home, "global"), filepath.Join(home, "system")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(evil), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "xdg"))
	t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, "global"))
	t.Setenv("GIT_CONFIG_SYSTEM", filepath.Join(home, "system"))
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
	t.Setenv("GIT_CONFIG_VALUE_0", hooks)
	t.Setenv("GIT_TEMPLATE_DIR", filepath.Join(home, "template"))
	t.Setenv("GIT_ALLOW_PROTOCOL", "ext:file:ssh")
	// The controller's own working directory is not where git runs.
	wd, _ := os.Getwd()
	if err := os.Chdir(home); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) })

	r := ensure(t, src)
	second := commit(t, src, "b.txt", "b\n")
	if got, err := r.Fetch(ctx, "trunk"); err != nil || got != second {
		t.Fatalf("Fetch = %s, %v", got, err)
	}
	if _, err := r.FetchIncoming(ctx, "trunk"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DefaultBranch(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.IsAncestor(ctx, first, "trunk"); err != nil || !ok {
		t.Fatalf("IsAncestor = %v, %v", ok, err)
	}
	if err := r.Pack(ctx, io.Discard, []string{second}, []string{first}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteBranch(ctx, "nothing-here"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("git ran what an outside config said:\n%s", b)
	}
	if hooks, _ := filepath.Glob(filepath.Join(r.Dir, "hooks", "*")); len(hooks) != 0 {
		t.Fatalf("the base clone got hooks from a template: %v", hooks)
	}

	// Each call's command line and environment say so themselves.
	cmd := r.command(ctx, true, "fetch")
	if cmd.Dir != "/" {
		t.Fatalf("git runs in %q", cmd.Dir)
	}
	args := strings.Join(cmd.Args, " ")
	for _, want := range []string{"-c core.hooksPath=/dev/null", "-c core.fsmonitor=false", "-c protocol.allow=never",
		"-c protocol.file.allow=always", "-c protocol.ext.allow=never", "--git-dir=" + r.Dir} {
		if !strings.Contains(args, want) {
			t.Fatalf("git %s lacks %q", args, want)
		}
	}
	env := map[string]string{}
	for _, kv := range cmd.Env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := env[k]; dup {
			t.Fatalf("%s twice in git's environment", k)
		}
		env[k] = v
	}
	for k, v := range map[string]string{"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": noHome,
		"XDG_CONFIG_HOME": noHome, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "", "GIT_CONFIG_KEY_0": "",
		"GIT_CONFIG_SYSTEM": "", "GIT_TEMPLATE_DIR": "", "GIT_ALLOW_PROTOCOL": ""} {
		if env[k] != v {
			t.Fatalf("git's %s = %q, want %q", k, env[k], v)
		}
	}
}

// The base clone's own config is the one git reads whatever the environment says; one holding
// anything a bare clone does not write is refused, not used.
func TestBaseCloneConfigIsChecked(t *testing.T) {
	ctx := context.Background()
	src, _ := newSource(t)
	r := ensure(t, src)
	cfg := filepath.Join(r.Dir, "config")
	orig, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "pwned")
	for _, extra := range []string{
		"[url \"ssh://x/y\"]\n\tinsteadOf = " + src + "\n",
		"[core]\n\tsshCommand = sh -c 'id > " + marker + "'; false #\n",
		"[core]\n\tfsmonitor = /bin/true\n",
		"[include]\n\tpath = /tmp/elsewhere\n",
		"[core] hooksPath = /tmp\n",
		"[remote \"origin\"]\n\turl = \\\n/elsewhere\n",
		"[remote \"origin\"]\n\tuploadpack = sh -c 'id > " + marker + "'\n",
	} {
		if err := os.WriteFile(cfg, append(append([]byte{}, orig...), extra...), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(ctx, "", src, r.Dir)
		wantCode(t, err, protocol.CodeCorrupt)
	}
	if err := os.WriteFile(cfg, []byte(strings.ToUpper(string(orig[:6]))+string(orig[6:])+"\n# a comment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, "", src, r.Dir); err != nil {
		t.Fatalf("a config as git writes it: %v", err)
	}
	alt := filepath.Join(r.Dir, "objects", "info", "alternates")
	if err := os.WriteFile(alt, []byte(t.TempDir()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Ensure(ctx, "", src, r.Dir)
	wantCode(t, err, protocol.CodeCorrupt)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused config was obeyed")
	}
}

func TestTransport(t *testing.T) {
	for src, want := range map[string]string{"/srv/repo": "file", "file:///srv/repo": "file", "host:repo": "ssh",
		"ssh://h/r": "ssh", "git+ssh://h/r": "ssh", "HTTPS://h/r": "https", "git://h/r": "git", "ext::sh -c x": "ext",
		"./a::b": "file"} {
		if got := transport(src); got != want {
			t.Errorf("transport(%q) = %q, want %q", src, got, want)
		}
	}
}
