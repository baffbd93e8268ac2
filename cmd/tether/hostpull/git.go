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
)

// GitDone is what a pull did with the workspace's commits.
type GitDone struct {
	Branch    string `json:"branch"`
	Head      string `json:"head"`
	Delivered bool   `json:"delivered"`
	// Conflict: the branch exists on the host with commits the workspace lacks; it was not
	// moved.
	Conflict bool   `json:"conflict,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// DeliverGit brings the commits reachable from head (and from none of haves) into the host
// repository at dir as branch, from a pack that host Git indexes with --strict (every object
// checked, every link present). HEAD, the index, the working tree and the current branch are
// not touched; a branch that exists moves only forward. Failures are reported, not returned: the
// files were applied already and stay.
func DeliverGit(ctx context.Context, dir, branch, head string, haves []string,
	pack func(ctx context.Context, want string, haves []string) (io.ReadCloser, error)) GitDone {
	d := GitDone{Branch: branch, Head: head}
	fail := func(format string, args ...any) GitDone {
		d.Reason = fmt.Sprintf(format, args...)
		return d
	}
	g := hostGit{dir: dir}
	if bare, _ := g.run(ctx, nil, "rev-parse", "--is-bare-repository"); bare != "true" {
		if fi, err := os.Lstat(filepath.Join(dir, ".git")); err != nil || !fi.IsDir() {
			return fail("%s is not the top of a Git repository (no .git directory)", dir)
		}
	}
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

// hostGit runs the host's git on the user's own repository, with its hooks and fsmonitor off
// and no GIT_* variable of the caller's pointing it elsewhere.
type hostGit struct{ dir string }

func (g hostGit) run(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	full := append([]string{"-C", g.dir, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
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
