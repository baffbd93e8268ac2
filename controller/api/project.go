package api

import (
	"time"

	"github.com/tetherhq/tether/protocol"
)

// Project modes: how a project's tasks get their checkout.
const (
	// ModeIsolated gives every request a new workspace on its own branch (tether/<name>).
	ModeIsolated = "isolated"
	// ModeShared reuses the project's open workspace of a branch (the base ref's by default).
	ModeShared = "shared"
	// ModeOperatorBranch reuses the open workspace of a branch the operator names.
	ModeOperatorBranch = "operator-branch"
)

// StrategyClone is how every workspace's files come from the project's source: a repository of
// the workspace's own that the runner builds inside the sandbox from a pack the controller
// streams over the runner's websocket (no network remote, nothing shared with the base clone).
// Workspaces recorded by earlier controllers on the local provider may say "worktree".
const StrategyClone = "clone"

// Project is a Git source and how its tasks get checkouts of it.
type Project struct {
	ID        string    `json:"id"` // prj_...
	Name      string    `json:"name"`
	Source    string    `json:"source"`   // a path on the controller's host or a URL git can fetch
	BaseRef   string    `json:"base_ref"` // a branch of the source, e.g. main
	Mode      string    `json:"mode"`
	Provision []string  `json:"provision,omitempty"` // shell commands run in each new allocation
	Teardown  []string  `json:"teardown,omitempty"`  // shell commands run before an allocation is released
	CreatedAt time.Time `json:"created_at"`
}

// CreateProjectRequest is the body of POST /v1/projects.
type CreateProjectRequest struct {
	Name      string   `json:"name,omitempty"`
	Source    string   `json:"source"`
	BaseRef   string   `json:"base_ref,omitempty"` // default: the source's HEAD branch
	Mode      string   `json:"mode,omitempty"`     // default isolated
	Provision []string `json:"provision,omitempty"`
	Teardown  []string `json:"teardown,omitempty"`
}

// WorkspaceGit is what a project workspace records of its checkout.
type WorkspaceGit struct {
	ProjectID  string `json:"project_id"`
	Mode       string `json:"mode"`
	Strategy   string `json:"strategy"`
	Branch     string `json:"branch"`
	BaseRef    string `json:"base_ref"`
	BaseCommit string `json:"base_commit"` // the base ref's commit when the checkout was made
	// StartCommit is where the branch started when the source already had it (its tip there);
	// empty when the branch was new and started at BaseCommit.
	StartCommit string   `json:"start_commit,omitempty"`
	Provision   []string `json:"provision,omitempty"` // the workspace's own, after the project's
	Teardown    []string `json:"teardown,omitempty"`
}

// Delivery states of a workspace's work.
const (
	// DeliveredByAncestry: the base ref at the source contains the workspace's HEAD.
	DeliveredByAncestry = "merged_by_ancestry"
	Unmerged            = "unmerged"
	// DeliveryUnknown: the source could not be reached (or the HEAD could not be read).
	DeliveryUnknown = "unknown"
)

// Inspection answers `tether workspace inspect`: computed on demand, never during plain reads.
type Inspection struct {
	WorkspaceID string `json:"workspace_id"`
	Source      string `json:"source"` // live (the runner) or saved (the last receipt)
	Head        string `json:"head"`
	Branch      string `json:"branch,omitempty"`
	BaseRef     string `json:"base_ref,omitempty"`
	BaseCommit  string `json:"base_commit,omitempty"` // the base ref's commit at the source now
	Ahead       int    `json:"ahead"`                 // commits on HEAD not in the base
	Behind      int    `json:"behind"`                // commits in the base not on HEAD
	Staged      int    `json:"staged"`
	Unstaged    int    `json:"unstaged"`
	Untracked   int    `json:"untracked"`
	Delivery    string `json:"delivery"`
	Reason      string `json:"reason,omitempty"` // why delivery is unknown
}

// ReconcileResult answers `tether workspace reconcile`.
type ReconcileResult struct {
	WorkspaceID string `json:"workspace_id"`
	BaseRef     string `json:"base_ref"`
	BaseCommit  string `json:"base_commit"`
	Before      string `json:"before"` // HEAD before
	After       string `json:"after"`  // HEAD after
	Ahead       int    `json:"ahead"`
	Behind      int    `json:"behind"`
	// Action: fast_forwarded, up_to_date, ahead (only local commits: nothing to take),
	// diverged (both sides moved: reported, not resolved) or dirty (uncommitted changes: not
	// fast-forwarded).
	Action string `json:"action"`
}

// GCRequest is the body of POST /v1/gc.
type GCRequest struct {
	// Grace: only workspaces closed at least this long ago, and snapshot objects no live receipt
	// needs stored at least this long ago (default 24h when absent). Objects a capture or a read
	// pins are kept whatever the grace.
	Grace  *protocol.Duration `json:"grace,omitempty"`
	DryRun bool               `json:"dry_run,omitempty"`
}

// GCCandidate is one closed workspace the sweep looked at.
type GCCandidate struct {
	WorkspaceID string `json:"workspace_id"`
	Name        string `json:"name"`
	Reclaimable bool   `json:"reclaimable"`
	// Why: how its work is reconstructable (delivered, receipt) or why it is kept.
	Why       string `json:"why"`
	Bytes     int64  `json:"bytes"`     // what reclaiming frees (or freed)
	Reclaimed bool   `json:"reclaimed"` // this sweep reclaimed it
}

// GCResult answers a sweep.
type GCResult struct {
	DryRun     bool          `json:"dry_run"`
	Candidates []GCCandidate `json:"candidates"`
	// Pruned: what the controller's default retention policy removed, per workspace (none when
	// it has no policy).
	Pruned []PruneResult `json:"pruned,omitempty"`
	// Objects: the snapshot objects this sweep deleted (or, on a dry run, would).
	Objects StorageFigure `json:"objects"`
	// Bytes: all it freed (or would), objects and base clones.
	Bytes int64 `json:"reclaimed_bytes"`
	// ExpiredUploads: the resumable upload sessions past their expiry it removed (staged bytes
	// included); a dry run removes none.
	ExpiredUploads int `json:"expired_uploads,omitempty"`
}
