package protocol

// Git workspace operations, opened by the controller. They act on the Git repository at the
// workspace root.
const (
	// OpGitCheckout fills an empty workspace root with a checkout (Args: GitCheckoutArgs). The
	// request has a body: a Git pack (`git pack-objects` output) holding every object reachable
	// from Commit; the runner builds a repository of the workspace's own from it, without a
	// network remote and without a git binary. Result: GitStatus of the new checkout.
	OpGitCheckout = "git_checkout"
	// OpGitInspect (Args: GitInspectArgs) reads the repository: Result GitStatus. Read-only.
	OpGitInspect = "git_inspect"
	// OpGitReconcile (Args: GitReconcileArgs) takes the base ref's new commit: with HasPack a
	// pack body carries the objects the workspace may lack. The runner records the commit as
	// refs/remotes/origin/<BaseRef>, then fast-forwards the checked-out branch to it only when
	// the branch has no commits of its own the base lacks and the tree is clean. Result:
	// GitReconcileReply.
	OpGitReconcile = "git_reconcile"
	// OpGitBranch (Args: GitBranchArgs) creates a branch at HEAD's commit and moves HEAD onto
	// it; the index and the working tree stay as they are (a fork's own branch). A branch that
	// exists already is refused (conflict). Result: GitStatus.
	OpGitBranch = "git_branch"
)

// GitBranchArgs are the arguments of OpGitBranch.
type GitBranchArgs struct {
	Branch string `json:"branch"`
}

// GitStrategyClone is the one checkout strategy (see OpGitCheckout).
const GitStrategyClone = "clone"

// GitCheckoutArgs are the arguments of OpGitCheckout.
type GitCheckoutArgs struct {
	Strategy string `json:"strategy"`
	// Branch is created at Commit and checked out. Commit is a full 40-hex object id.
	Branch string `json:"branch"`
	Commit string `json:"commit"`
	// BaseRef (e.g. main) is recorded as refs/remotes/origin/<BaseRef> at BaseCommit.
	BaseRef    string `json:"base_ref,omitempty"`
	BaseCommit string `json:"base_commit,omitempty"`
}

// GitInspectArgs are the arguments of OpGitInspect. With BaseCommit set (and present in the
// repository) Ahead/Behind are counted against it; else against the upstream of the branch, if
// any.
type GitInspectArgs struct {
	BaseCommit string `json:"base_commit,omitempty"`
}

// GitStatus is what the runner reads of a workspace's repository.
type GitStatus struct {
	Head     string `json:"head"`             // commit id, "" in an empty repository
	Branch   string `json:"branch,omitempty"` // "" when detached
	Upstream string `json:"upstream,omitempty"`
	// BaseKnown: the commit Ahead/Behind count against is present in the repository.
	BaseKnown bool `json:"base_known"`
	Ahead     int  `json:"ahead"`
	Behind    int  `json:"behind"`
	Staged    int  `json:"staged"`
	Unstaged  int  `json:"unstaged"`
	Untracked int  `json:"untracked"`
}

// Clean says there is nothing uncommitted (untracked files count as uncommitted).
func (g GitStatus) Clean() bool { return g.Staged == 0 && g.Unstaged == 0 && g.Untracked == 0 }

// GitReconcileArgs are the arguments of OpGitReconcile.
type GitReconcileArgs struct {
	BaseRef string `json:"base_ref"`
	Commit  string `json:"commit"` // the base ref's commit at the source
	HasPack bool   `json:"has_pack,omitempty"`
}

// Reconcile actions.
const (
	GitFastForwarded = "fast_forwarded"
	GitUpToDate      = "up_to_date"
	GitAhead         = "ahead"
	GitDiverged      = "diverged"
	GitDirty         = "dirty"
)

// GitReconcileReply says what reconciling did.
type GitReconcileReply struct {
	Before string `json:"before"`
	After  string `json:"after"`
	Ahead  int    `json:"ahead"`
	Behind int    `json:"behind"`
	Action string `json:"action"`
}

// OpGitPack (Args: GitPackArgs) streams a Git pack of the objects reachable from Want and from
// none of Haves (those the repository lacks are ignored): a first trailer (GitPackInfo, or the
// error), a body holding the pack, and a final trailer (GitPackResult). Read-only: a pull
// brings a workspace's commits to a host this way, where host Git checks every object.
const OpGitPack = "git_pack"

// GitPackArgs are the arguments of OpGitPack: full 40-hex commit ids.
type GitPackArgs struct {
	Want  string   `json:"want"`
	Haves []string `json:"haves,omitempty"`
}

// GitPackInfo is OpGitPack's first trailer.
type GitPackInfo struct {
	Objects int `json:"objects"`
}

// GitPackResult is OpGitPack's final trailer.
type GitPackResult struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}
