package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/cmd/tether/hostpull"
	"github.com/tetherhq/tether/controller/api"
	"github.com/tetherhq/tether/controller/client"
	"github.com/tetherhq/tether/protocol"
	"github.com/tetherhq/tether/sandbox/fsguard"
)

// pullConflictStatus is the exit status of a pull that left conflicts on the host, like a
// merge that stopped: distinct from every typed error's status.
const pullConflictStatus = 40

// pullReport is what workspace pull prints with --json.
type pullReport struct {
	Workspace string `json:"workspace"`
	Dir       string `json:"dir"`
	Base      string `json:"base"`
	Snapshot  string `json:"snapshot"`
	Changed   int    `json:"changed"`
	DryRun    bool   `json:"dry_run,omitempty"`
	Applied   int    `json:"applied"`
	Same      int    `json:"same"`
	Conflicts int    `json:"conflicts"`
	Recovery  string `json:"recovery_dir,omitempty"`
	// Resolved says how conflicts were settled: "theirs", "ours", or "" (left for the user).
	Resolved string `json:"resolved,omitempty"`
	// Late are paths the host changed after the plan looked: left as the host has them.
	Late []string `json:"late,omitempty"`
	// Fresh: the workspace was captured for this pull (else Snapshot is its newest receipt).
	Fresh bool `json:"fresh"`
	// NewBase: the receipt later pulls compare with, when this pull settled every path.
	NewBase string            `json:"new_base,omitempty"`
	Skipped api.Skipped       `json:"skipped"`
	Items   []hostpull.Item   `json:"items,omitempty"`
	Git     *hostpull.GitDone `json:"git,omitempty"`
}

func newWorkspacePullCmd(c *cli) *cobra.Command {
	var to, recovery, from string
	var dryRun, asJSON, theirs, ours bool
	cmd := &cobra.Command{
		Use:   "pull WORKSPACE",
		Short: "Bring a workspace's work back into the host directory it was made from",
		Long: `Pull compares three trees per path: what the workspace received (its base), the
workspace now (a fresh capture, or --snapshot), and the host directory now. A change the host
did not also make is applied (file bytes, modes, symlinks as links, removals), each file
atomically and through a guard that follows no symlink; a path both sides changed differently
is a conflict: the host's version stays (--theirs: the workspace's wins) and the other one is
kept in a recovery directory the report names. Only the paths the workspace changed are looked
at on the host. The workspace's commits arrive as the branch tether/<workspace>, without moving
the host's HEAD, index or current branch.

Exit status: 0 applied (or nothing to do), 40 when conflicts remain, a typed error's otherwise
(a host parent that is a file, a symlink or missing refuses the whole pull before any write).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if theirs && ours {
				return usageError{errors.New("--theirs and --ours exclude each other")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ws, err := cl.GetWorkspace(ctx, args[0])
			if err != nil {
				return err
			}
			if ws.SourceBase == "" && ws.Git != nil && ws.Git.ProjectID != "" {
				return c.pullProject(ctx, cl, ws, to, asJSON)
			}
			dir := to
			if dir == "" {
				dir = ws.SourceDir
			}
			if dir == "" {
				return protocol.Errorf(protocol.CodeUnsupported, "workspace %s has no source directory: it was not created with --source (copy files with tether cp)", ws.Name)
			}
			if dir, err = resolveDir(dir); err != nil {
				return err
			}
			unlock, err := lockDir(dir)
			if err != nil {
				return err
			}
			defer unlock()
			// The controller checks the caller's authority before anything on the host is read.
			plan, err := cl.Pull(ctx, ws.ID, api.PullRequest{Snapshot: from})
			if err != nil {
				return err
			}
			rep := pullReport{Workspace: ws.Name, Dir: dir, Base: plan.Base, Snapshot: plan.Snapshot, Fresh: plan.Fresh,
				Changed: len(plan.Changes), DryRun: dryRun, Skipped: plan.Skipped}
			gitMoved := plan.Git != nil && (plan.BaseGit == nil || plan.Git.Head != plan.BaseGit.Head)
			if rep.Changed == 0 && !gitMoved {
				// The workspace is its base: nothing on the host is read or written.
				return c.pullDone(rep, asJSON)
			}
			root, err := fsguard.Open(dir)
			if err != nil {
				return fmt.Errorf("open %s: %w", dir, err)
			}
			defer root.Close()
			hp, err := hostpull.MakePlan(root, plan.Changes)
			if err != nil {
				return err
			}
			rep.Items, rep.Same, rep.Conflicts, rep.Applied = hp.Items, hp.Same, hp.Conflicts, hp.Apply
			if dryRun {
				return c.pullDone(rep, asJSON)
			}
			if recovery == "" {
				recovery = defaultRecoveryDir(ws.Name, plan.Snapshot)
			}
			switch {
			case theirs:
				rep.Resolved = "theirs"
			case ours:
				rep.Resolved = "ours"
			}
			res, err := hostpull.Apply(ctx, root, hp, hostpull.Options{Theirs: theirs, RecoveryDir: recovery,
				Files: func(ctx context.Context, paths []string) (io.ReadCloser, error) {
					return cl.SnapshotFiles(ctx, plan.Snapshot, paths)
				}})
			rep.Applied, rep.Recovery, rep.Conflicts, rep.Late = res.Applied, res.Recovery, res.Conflicts, res.LatePaths
			if err != nil {
				if res.Applied > 0 || res.Recovery != "" {
					// Part of it happened: say what, and where the versions not kept went.
					_ = c.pullDone(rep, asJSON)
				}
				return err
			}
			if gitMoved {
				done := hostpull.GitDone{Branch: "tether/" + ws.Name, Head: plan.Git.Head, NoRepository: true,
					Reason: dir + " is not the top of a Git repository (no .git directory)"}
				if repo, ok := hostpull.WorktreeRepo(dir); ok {
					done = hostpull.DeliverGit(ctx, repo, "tether/"+ws.Name, plan.Git.Head, baseHaves(plan),
						func(ctx context.Context, want string, haves []string) (io.ReadCloser, error) {
							return cl.GitPack(ctx, ws.ID, want, haves)
						})
				}
				rep.Git = &done
			}
			settled := res.Late == 0 && (hp.Conflicts == 0 || theirs || ours)
			if src, _ := resolveDir(ws.SourceDir); settled && dir == src && plan.Snapshot != plan.Base {
				// The source now holds this tree (or its owner's choice per conflict): the next
				// pull compares with it.
				if _, err := cl.Pulled(ctx, ws.ID, plan.Base, plan.Snapshot); err != nil {
					return err
				}
				rep.NewBase = plan.Snapshot
			}
			if err := c.pullDone(rep, asJSON); err != nil {
				return err
			}
			switch {
			case rep.Git != nil && rep.Git.Failed():
				return protocol.Errorf(protocol.CodeFailed, "the files were applied but the commits were not delivered: %s", rep.Git.Reason)
			case !settled || rep.Git != nil && rep.Git.Conflict:
				return exitStatus(pullConflictStatus)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "host directory to pull into (default: the workspace's --source directory)")
	cmd.Flags().StringVar(&from, "snapshot", "", "pull this receipt of the workspace instead of a fresh capture")
	cmd.Flags().StringVar(&recovery, "recovery-dir", "", "where the version of each conflicting path that is not kept goes (default: under $XDG_STATE_HOME/tether/pull)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	cmd.Flags().BoolVar(&theirs, "theirs", false, "resolve conflicts with the workspace's version (the host's is kept in the recovery directory)")
	cmd.Flags().BoolVar(&ours, "ours", false, "resolve conflicts with the host's version (the workspace's is kept in the recovery directory); exit 0")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func baseHaves(plan api.PullPlan) []string {
	if plan.BaseGit == nil {
		return nil
	}
	return []string{plan.BaseGit.Head}
}

func (c *cli) pullDone(rep pullReport, asJSON bool) error {
	if asJSON {
		return c.printJSON(rep)
	}
	if !rep.Fresh {
		c.printf("(from receipt %s: the workspace has no runner connected)\n", rep.Snapshot)
	}
	if rep.Skipped.Count > 0 {
		c.printf("not pulled: %d changed paths inside a .git or named like Tether's temporary files (%s)\n",
			rep.Skipped.Count, strings.Join(rep.Skipped.Paths[:min(3, len(rep.Skipped.Paths))], ", "))
	}
	if rep.Changed == 0 && rep.Git == nil {
		c.printf("%s: nothing changed since its base %s; %s left untouched\n", rep.Workspace, rep.Base, rep.Dir)
		return nil
	}
	for _, it := range rep.Items {
		switch it.Action {
		case hostpull.ActApply:
			c.printf("%s %s\n", changeLetter(it.PathChange), it.Path)
		case hostpull.ActConflict:
			how := map[string]string{"theirs": " (the workspace's version taken)", "ours": " (the host's version kept)"}[rep.Resolved]
			if it.Stuck {
				how = " (the host holds files in it: kept)"
			}
			c.printf("C %s: %s%s\n", it.Path, it.Reason, how)
		}
	}
	verb := "applied"
	if rep.DryRun {
		verb = "would apply"
	}
	c.printf("%s: %d changed, %s %d, %d already on the host, %d conflicts", rep.Workspace, rep.Changed, verb, rep.Applied, rep.Same, rep.Conflicts)
	if rep.Recovery != "" {
		c.printf("; the versions not kept are in %s", rep.Recovery)
	}
	c.printf("\n")
	for _, p := range rep.Late {
		c.printf("C %s: the host changed it during the pull (kept)\n", p)
	}
	if g := rep.Git; g != nil {
		if g.Delivered {
			c.printf("commits: %s at %s (git log %s)\n", g.Branch, shortID(g.Head), g.Branch)
		} else if g.NoRepository {
			c.printf("commits: none delivered: %s\n", g.Reason)
		} else {
			c.printf("commits: not delivered: %s\n", g.Reason)
		}
	}
	return nil
}

func changeLetter(ch api.PathChange) string {
	switch {
	case ch.Base.Type == "":
		return "A"
	case ch.Workspace.Type == "":
		return "D"
	case ch.Base.Type != ch.Workspace.Type:
		return "T"
	}
	return "M"
}

// resolveDir is dir absolute with its symlinks resolved: the operator's own path to the
// directory (from here on nothing is followed).
func resolveDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeNotFound, "%s: %v", dir, err)
	}
	return real, nil
}

// lockDir takes an exclusive lock on dir itself (flock on its descriptor: nothing is created
// in it), refusing when another pull holds it.
func lockDir(dir string) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "open %s: %v", dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, protocol.Errorf(protocol.CodeConflict, "another pull into %s is running", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { unix.Close(fd) }, nil
}

func defaultRecoveryDir(ws, snap string) string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return filepath.Join(base, "tether", "pull", fmt.Sprintf("%s-%s-%s-%x", ws, snap, time.Now().UTC().Format("20060102T150405"), b))
}

var _ io.ReadCloser = (*client.Confirmed)(nil)

// projectPullReport is what workspace pull prints for a project workspace.
type projectPullReport struct {
	Workspace   string           `json:"workspace"`
	Dir         string           `json:"dir"`
	Git         hostpull.GitDone `json:"git"`
	Uncommitted int              `json:"uncommitted"`
	Delivery    string           `json:"delivery,omitempty"`
}

// pullProject delivers a project workspace's branch into the project's source repository (or
// --to, a clone of it): a ref the source has not checked out, moved only forward. What is not
// committed stays in the workspace; the report counts it.
func (c *cli) pullProject(ctx context.Context, cl *client.Client, ws api.Workspace, to string, asJSON bool) error {
	dir := to
	if dir == "" {
		p, err := cl.GetProject(ctx, ws.Git.ProjectID)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(p.Source); err != nil || !fi.IsDir() {
			return protocol.Errorf(protocol.CodeInvalidArgument, "project %s's source %s is not a directory here: give --to, a clone of it", p.Name, p.Source)
		}
		dir = p.Source
	}
	dir, err := resolveDir(dir)
	if err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	plan, err := cl.Pull(ctx, ws.ID, api.PullRequest{})
	if err != nil {
		return err
	}
	rep := projectPullReport{Workspace: ws.Name, Dir: dir, Uncommitted: plan.Uncommitted}
	if plan.Git == nil || plan.Project == nil {
		rep.Git = hostpull.GitDone{Reason: "the workspace's repository has no commit"}
	} else {
		repo, ok := hostpull.WorktreeRepo(dir)
		if !ok {
			repo, ok = hostpull.BareRepo(dir)
		}
		if !ok {
			rep.Git = hostpull.GitDone{Reason: dir + " is no Git repository (neither DIR/.git nor a bare one)"}
		} else {
			rep.Git = hostpull.DeliverGit(ctx, repo, plan.Project.Branch, plan.Git.Head, plan.Project.Haves,
				func(ctx context.Context, want string, haves []string) (io.ReadCloser, error) {
					return cl.GitPack(ctx, ws.ID, want, haves)
				})
		}
	}
	if in, err := cl.InspectWorkspace(ctx, ws.ID); err == nil {
		rep.Delivery = in.Delivery
	}
	if asJSON {
		if err := c.printJSON(rep); err != nil {
			return err
		}
	} else {
		if rep.Git.Delivered {
			c.printf("%s: branch %s at %s delivered to %s (delivery: %s)\n", ws.Name, rep.Git.Branch, shortID(rep.Git.Head), dir, rep.Delivery)
		} else {
			c.printf("%s: commits not delivered: %s\n", ws.Name, rep.Git.Reason)
		}
		if rep.Uncommitted > 0 {
			c.printf("%d uncommitted paths stay in the workspace: commit them there to deliver them\n", rep.Uncommitted)
		}
	}
	switch {
	case rep.Git.Conflict:
		return exitStatus(pullConflictStatus)
	case !rep.Git.Delivered:
		return protocol.Errorf(protocol.CodeFailed, "the branch of %s was not delivered: %s", ws.Name, rep.Git.Reason)
	}
	return nil
}
