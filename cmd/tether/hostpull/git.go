package hostpull

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/controller/api"
)

// GitDone is what a pull did with the workspace's commits.
type GitDone struct {
	Branch    string `json:"branch"`
	Head      string `json:"head"`
	Delivered bool   `json:"delivered"`
	// Conflict: the branch exists on the host with commits the workspace lacks; it was not
	// moved.
	Conflict bool `json:"conflict,omitempty"`
	// NoRepository: the host directory is no Git repository, so there was nowhere to deliver
	// to (not a failure of the pull).
	NoRepository bool   `json:"no_repository,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// Failed says the commits should have arrived and did not.
func (d GitDone) Failed() bool { return !d.Delivered && !d.Conflict && !d.NoRepository }

// Repo is a host repository, named explicitly so that Git never discovers one: GitDir is its
// git directory (DIR/.git, or a bare repository's DIR), WorkTree its worktree ("" when bare).
type Repo struct{ GitDir, WorkTree string }

// WorktreeRepo is the repository whose worktree is dir: dir/.git must be a directory of its own
// (not a symlink, not a gitdir file), or there is none.
func WorktreeRepo(dir string) (Repo, bool) {
	fi, err := os.Lstat(filepath.Join(dir, ".git"))
	if err != nil || !fi.IsDir() {
		return Repo{}, false
	}
	return Repo{GitDir: filepath.Join(dir, ".git"), WorkTree: dir}, true
}

// BareRepo is dir as a bare repository, if it looks like one (HEAD a file, objects and refs
// directories, none a symlink): only for a directory the operator named, never one a pull
// wrote into.
func BareRepo(dir string) (Repo, bool) {
	for name, isDir := range map[string]bool{"HEAD": false, "objects": true, "refs": true} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || fi.Mode()&os.ModeSymlink != 0 || fi.IsDir() != isDir {
			return Repo{}, false
		}
	}
	return Repo{GitDir: dir}, true
}

// DeliverGit brings the commits reachable from head (and from none of haves) into repo as
// branch, from a pack that host Git indexes with --strict (every object checked, every link
// present). HEAD, the index, the working tree and the current branch are not touched; a branch
// that exists moves only forward. Failures are reported, not returned: the files were applied
// already and stay.
func DeliverGit(ctx context.Context, repo Repo, branch, head string, haves []string,
	pack func(ctx context.Context, want string, haves []string) (io.ReadCloser, error)) GitDone {
	d := GitDone{Branch: branch, Head: head}
	fail := func(format string, args ...any) GitDone {
		d.Reason = fmt.Sprintf(format, args...)
		return d
	}
	// The head and haves came from the workspace's runner: object ids or nothing, never an
	// option or a revision name.
	if !api.IsObjectID(head) {
		return fail("the workspace's HEAD %q is not an object id", head)
	}
	for _, h := range haves {
		if !api.IsObjectID(h) {
			return fail("%q is not an object id", h)
		}
	}
	g := hostGit{repo: repo}
	ref := "refs/heads/" + branch
	if _, err := g.run(ctx, nil, "check-ref-format", ref); err != nil {
		return fail("%s is not a valid branch name", branch)
	}
	if cur, _ := g.run(ctx, nil, "symbolic-ref", "-q", "HEAD"); cur == ref {
		return fail("%s is checked out on the host; switch branches and pull again", branch)
	}
	old, _ := g.run(ctx, nil, "rev-parse", "-q", "--verify", ref+"^{commit}")
	if old == head {
		d.Delivered = true
		return d
	}
	if _, err := g.run(ctx, nil, "cat-file", "-e", head+"^{commit}"); err != nil {
		rc, err := pack(ctx, head, haves)
		if err != nil {
			return fail("fetch the commits: %v", err)
		}
		_, err = g.run(ctx, rc, "index-pack", "--stdin", "--strict")
		rc.Close()
		if err != nil {
			return fail("take the commits in: %v", err)
		}
	}
	if old != "" {
		if _, err := g.run(ctx, nil, "merge-base", "--is-ancestor", old, head); err != nil {
			d.Conflict = true
			return fail("%s has commits the workspace lacks (%s); it was not moved", branch, old[:min(12, len(old))])
		}
	}
	if _, err := g.run(ctx, nil, "update-ref", "-m", "tether workspace pull", ref, head, old); err != nil {
		return fail("update %s: %v", branch, err)
	}
	d.Delivered = true
	return d
}

// hostGit runs the host's git on the user's own repository, named by --git-dir (and
// --work-tree) so nothing is discovered, with its hooks and fsmonitor off and no GIT_* variable
// of the caller's pointing it elsewhere.
type hostGit struct{ repo Repo }

func (g hostGit) run(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	full := []string{"--git-dir=" + g.repo.GitDir}
	if g.repo.WorkTree != "" {
		full = append(full, "--work-tree="+g.repo.WorkTree)
	}
	full = append(full, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
	cmd := exec.CommandContext(ctx, "git", append(full, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
