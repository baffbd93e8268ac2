package gitops

import (
	"context"
	"fmt"
	"io"
	"os"

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
