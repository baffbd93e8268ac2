package gitops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/gitstate"
)

// originRef is where the source's base ref is recorded: the name a clone of the source would
// give it, so `git log origin/main..` means in the workspace what it means anywhere.
func originRef(baseRef string) plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", baseRef)
}

// CloneFromPack builds a repository at root, an existing empty directory, from a Git pack
// holding every object reachable from args.Commit (and args.BaseCommit): refs/heads/<Branch> at
// Commit, checked out (files and index) and HEAD on it; refs/remotes/origin/<BaseRef> at
// BaseCommit when both are given, and the branch set to track it. There is no network remote:
// "origin" has a fetch refspec and no URL, just enough for `git status` to say how far the branch
// is ahead of origin/<BaseRef> (a `git fetch` fails plainly). On failure root is left empty.
func CloneFromPack(ctx context.Context, root string, pack io.Reader, args protocol.GitCheckoutArgs) (protocol.GitStatus, error) {
	commit, base, err := checkCloneArgs(args)
	if err != nil {
		return protocol.GitStatus{}, err
	}
	if err := checkEmptyDir(root); err != nil {
		return protocol.GitStatus{}, err
	}
	if pack == nil {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeInvalidArgument, "a clone needs a pack")
	}
	if err := clone(ctx, root, pack, args, commit, base); err != nil {
		emptyDir(root)
		return protocol.GitStatus{}, err
	}
	return Inspect(ctx, root, protocol.GitInspectArgs{BaseCommit: args.BaseCommit})
}

// CheckClone refuses, before any pack is read, what CloneFromPack would refuse without one:
// bad arguments, a root that is not an empty directory.
func CheckClone(root string, args protocol.GitCheckoutArgs) error {
	if _, _, err := checkCloneArgs(args); err != nil {
		return err
	}
	return checkEmptyDir(root)
}

func checkCloneArgs(args protocol.GitCheckoutArgs) (commit, base plumbing.Hash, err error) {
	if err = CheckRefName("branch", args.Branch); err != nil {
		return
	}
	if commit, err = parseCommit("commit", args.Commit); err != nil {
		return
	}
	if args.BaseRef != "" {
		if err = CheckRefName("base ref", args.BaseRef); err != nil {
			return
		}
	}
	if args.BaseCommit != "" {
		if base, err = parseCommit("base commit", args.BaseCommit); err != nil {
			return
		}
	}
	return
}

func clone(ctx context.Context, root string, pack io.Reader, args protocol.GitCheckoutArgs, commit, base plumbing.Hash) error {
	// The pack stays open while the checkout reads every blob from it, instead of being opened
	// (its path resolved, its header read) once per object.
	branch := plumbing.NewBranchReferenceName(args.Branch)
	wt, err := newGuardFS(root)
	if err != nil {
		return err
	}
	defer wt.Close()
	if err := wt.root.Mkdir(git.GitDirName, 0o755); err != nil {
		return err
	}
	// .git is pinned by descriptor: a directory swapped for a symlink meanwhile cannot redirect
	// the pack, the refs or the config anywhere else.
	dot, err := wt.sub(git.GitDirName)
	if err != nil {
		return err
	}
	defer dot.Close()
	s := filesystem.NewStorageWithOptions(dot, cache.NewObjectLRU(objectCacheSize),
		filesystem.Options{MaxOpenDescriptors: 4})
	defer s.Close()
	r, err := git.InitWithOptions(s, wt, git.InitOptions{DefaultBranch: branch})
	if err != nil {
		return fmt.Errorf("git init: %w", err)
	}
	if err := storePack(ctx, s, pack); err != nil {
		return err
	}
	rp := &repo{Repository: r, storage: s}
	for _, c := range []plumbing.Hash{commit, base} {
		if c.IsZero() {
			continue
		}
		if ok, err := hasCommit(rp, c); err != nil {
			return err
		} else if !ok {
			return protocol.Errorf(protocol.CodeCorrupt, "the pack does not hold commit %s", c)
		}
	}
	if err := gitstate.CheckHistory(ctx, rp, commit, base); err != nil {
		return err
	}
	if err := s.SetReference(plumbing.NewHashReference(branch, commit)); err != nil {
		return err
	}
	if args.BaseRef != "" && !base.IsZero() {
		if err := s.SetReference(plumbing.NewHashReference(originRef(args.BaseRef), base)); err != nil {
			return err
		}
		if err := setTracking(r, dot, args.Branch, args.BaseRef); err != nil {
			return err
		}
	}
	w, err := r.Worktree()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A hard reset from an empty index writes every file of the commit and the index, with the
	// files' stat data, so Git's own `git status` finds the tree clean without rehashing it.
	if err := w.Reset(&git.ResetOptions{Commit: commit, Mode: git.HardReset}); err != nil {
		return missingObjects("check out "+commit.String(), err)
	}
	return nil
}

// setTracking makes branch track origin's baseRef: branch.<b>.remote origin, merge
// refs/heads/<baseRef>, and remote.origin with the default fetch refspec but no URL. go-git's
// config validation insists on a URL, so the file is written directly from go-git's own
// encoding. (Git's other spelling of a local upstream, remote "." with merge refs/remotes/...,
// is one go-git refuses to read at all.)
func setTracking(r *git.Repository, dot billy.Filesystem, branch, baseRef string) error {
	cfg, err := r.Config()
	if err != nil {
		return err
	}
	if _, ok := cfg.Remotes["origin"]; !ok {
		cfg.Remotes["origin"] = &config.RemoteConfig{Name: "origin",
			Fetch: []config.RefSpec{config.RefSpec(fmt.Sprintf(config.DefaultFetchRefSpec, "origin"))}}
	}
	cfg.Branches[branch] = &config.Branch{Name: branch, Remote: "origin", Merge: plumbing.NewBranchReferenceName(baseRef)}
	b, err := cfg.Marshal()
	if err != nil {
		return err
	}
	return writeFileAtomic(dot, "config", b, 0o644)
}

// writeFileAtomic replaces name in fsys with data so that a reader sees the old or the new file,
// never a half-written one.
func writeFileAtomic(fsys billy.Filesystem, name string, data []byte, mode os.FileMode) error {
	tmp := name + ".lock"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, name)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
	}
	return err
}

// WorktreeAdd checks out a new branch at args.Commit into root (an existing empty directory) as
// a linked worktree of the repository at args.BaseRepo, with the git binary gitBin:
// `git --git-dir=BaseRepo worktree add -b Branch root Commit`. The workspace shares the base
// repository's objects and refs; the base's HEAD and other branches do not move. On failure root
// is left empty.
func WorktreeAdd(ctx context.Context, gitBin, root string, args protocol.GitCheckoutArgs) (protocol.GitStatus, error) {
	if args.BaseRepo == "" || !filepath.IsAbs(args.BaseRepo) {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeInvalidArgument, "base repository %q: an absolute path is required", args.BaseRepo)
	}
	if err := CheckRefName("branch", args.Branch); err != nil {
		return protocol.GitStatus{}, err
	}
	if _, err := parseCommit("commit", args.Commit); err != nil {
		return protocol.GitStatus{}, err
	}
	if err := checkEmptyDir(root); err != nil {
		return protocol.GitStatus{}, err
	}
	if fi, err := os.Stat(args.BaseRepo); err != nil || !fi.IsDir() {
		return protocol.GitStatus{}, protocol.Errorf(protocol.CodeNotFound, "base repository %s is not a directory", args.BaseRepo)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return protocol.GitStatus{}, err
	}
	// Hooks of the base repository do not run: a checkout is not the place for side effects.
	cmd := exec.CommandContext(ctx, gitBin, "--git-dir="+args.BaseRepo, "-c", "core.hooksPath=/dev/null",
		"worktree", "add", "--quiet", "-b", args.Branch, root, strings.ToLower(args.Commit))
	cmd.Env = gitEnv(os.Environ())
	cmd.Dir = args.BaseRepo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Run(); err != nil {
		// Git removes a worktree it failed to make, sometimes with the directory itself.
		if _, serr := os.Lstat(root); errors.Is(serr, os.ErrNotExist) {
			_ = os.Mkdir(root, fi.Mode().Perm())
		} else {
			emptyDir(root)
		}
		if ctx.Err() != nil {
			return protocol.GitStatus{}, ctx.Err()
		}
		msg := strings.TrimSpace(stderr.String())
		code := protocol.CodeFailed
		if strings.Contains(msg, "already exists") {
			code = protocol.CodeConflict
		}
		return protocol.GitStatus{}, protocol.Errorf(code, "git worktree add: %v: %s", err, lastBytes(msg, 4096))
	}
	return Inspect(ctx, root, protocol.GitInspectArgs{BaseCommit: args.BaseCommit, AllowLinked: true})
}

// gitEnv is the runner's environment for a git command: no GIT_* variable of the runner's may
// redirect it to another repository, index or object directory, and it never prompts.
func gitEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if strings.HasPrefix(kv, "GIT_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GIT_TERMINAL_PROMPT=0")
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
